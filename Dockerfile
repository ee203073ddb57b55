# The strait image: one static binary, no libc, no shell, and nothing to pull
# (FROM scratch), so it builds where no registry is reachable. The build
# context is a directory holding only the binary; scripts/image.sh builds
# both (CGO_ENABLED=0, k8s/e2e checks the binary is static) and the image:
#   scripts/image.sh                                   # buildah, or docker
#   kind load image-archive /var/cache/strait/images/ghcr.io_strait-net_strait_latest-<sha>.tar
# README, "Kubernetes", says how to load it into k3s or push it to a registry.
FROM scratch
COPY strait /strait
USER 65532:65532
ENTRYPOINT ["/strait"]
