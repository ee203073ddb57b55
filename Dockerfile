# A static strait image: one binary, no libc, no shell.
#   docker build -t ghcr.io/strait-net/strait:latest .
# The build is CGO_ENABLED=0 (k8s/deploy_test.go checks that this yields a
# static binary); the runtime image is distroless/static, non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 GOFLAGS=-trimpath go build -ldflags "-s -w -X main.version=${VERSION}" -o /out/strait ./cmd/strait

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/strait /strait
USER 65532:65532
ENTRYPOINT ["/strait"]
