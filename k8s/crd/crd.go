// Package crd makes the CustomResourceDefinitions strait installs: the MCS
// API's ServiceExport and ServiceImport exactly as sigs.k8s.io/mcs-api
// publishes them, and strait.dev/v1alpha1 Peer and AccessPolicy generated
// from package catalog's Go types (by reflection over their JSON tags, plus
// the enums and bounds catalog's validation enforces), so the CRDs and the
// standalone schema are one schema. deploy/crds holds the rendered files; a
// test keeps them equal to Manifests (go test ./k8s/crd -update rewrites
// them).
package crd

import (
	"fmt"
	"reflect"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/k8s/api"
)

// Manifest is one CRD file.
type Manifest struct {
	File string // file name under deploy/crds
	YAML []byte
}

// Manifests returns every CRD strait needs, in install order.
func Manifests() ([]Manifest, error) {
	out := []Manifest{
		{"multicluster.x-k8s.io_serviceexports.yaml", mcscrd.ServiceExportCRD},
		{"multicluster.x-k8s.io_serviceimports.yaml", mcscrd.ServiceImportCRD},
	}
	for _, k := range []struct {
		kind, plural string
		spec         any
		doc          string
	}{
		{"Peer", "peers", catalog.PeerSpec{}, "Peer is another cluster of the clusterset: metadata.name is its cluster ID, spec.gateways where its gateways listen."},
		{"AccessPolicy", "accesspolicies", catalog.AccessPolicySpec{}, "AccessPolicy allows or denies connections from sources to exports; lower priority first, default deny."},
	} {
		c := straitCRD(k.kind, k.plural, k.doc, schemaOf(reflect.TypeOf(k.spec), k.kind+".spec"))
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			return nil, fmt.Errorf("crd %s: %w", k.kind, err)
		}
		delete(u, "status") // written by the API server
		b, err := yaml.Marshal(u)
		if err != nil {
			return nil, fmt.Errorf("crd %s: %w", k.kind, err)
		}
		header := "# Generated from package catalog's types by package k8s/crd; do not edit.\n"
		out = append(out, Manifest{fmt.Sprintf("%s_%s.yaml", api.GroupVersion.Group, k.plural), append([]byte(header), b...)})
	}
	return out, nil
}

func straitCRD(kind, plural, doc string, spec apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	spec.Description = "spec is the same as in standalone strait (strait apply -f)."
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + api.GroupVersion.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: api.GroupVersion.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List",
				Categories: []string{"strait"},
			},
			// Cluster-scoped, as catalog.Kind.Namespaced says.
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: api.GroupVersion.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:        "object",
					Description: doc,
					Required:    []string{"spec"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": {Type: "string"},
						"kind":       {Type: "string"},
						"metadata":   {Type: "object"},
						"spec":       spec,
					},
				}},
			}},
		},
	}
}

// constraints are what catalog's Validate enforces beyond the Go types,
// keyed by field path; the apiserver then rejects what catalog would.
var constraints = map[string]func(*apiextensionsv1.JSONSchemaProps){
	"Peer.spec.gateways": func(p *apiextensionsv1.JSONSchemaProps) { p.MinItems = ptr(int64(1)) },
	"AccessPolicy.spec.priority": func(p *apiextensionsv1.JSONSchemaProps) {
		p.Minimum, p.Maximum = ptr(float64(catalog.MinPriority)), ptr(float64(catalog.MaxPriority))
	},
	"AccessPolicy.spec.action": enum(catalog.Allow, catalog.Deny),
	"Peer.spec.dataPlane":      enum(catalog.DataPlaneStream, catalog.DataPlanePacket),
	"AccessPolicy.spec.from.workloadSelector.matchExpressions[].operator": enum(catalog.OpIn, catalog.OpNotIn, catalog.OpExists, catalog.OpDoesNotExist),
	"AccessPolicy.spec.to.exportSelector.matchExpressions[].operator":     enum(catalog.OpIn, catalog.OpNotIn, catalog.OpExists, catalog.OpDoesNotExist),
}

func enum[T ~string](vs ...T) func(*apiextensionsv1.JSONSchemaProps) {
	return func(p *apiextensionsv1.JSONSchemaProps) {
		for _, v := range vs {
			p.Enum = append(p.Enum, apiextensionsv1.JSON{Raw: []byte(`"` + string(v) + `"`)})
		}
	}
}

func ptr[T any](v T) *T { return &v }

// schemaOf is the structural OpenAPI schema of t as encoding/json writes
// it: a field without omitempty is required.
func schemaOf(t reflect.Type, path string) apiextensionsv1.JSONSchemaProps {
	var s apiextensionsv1.JSONSchemaProps
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), path)
	case reflect.String:
		s.Type = "string"
	case reflect.Bool:
		s.Type = "boolean"
	case reflect.Int32:
		s.Type, s.Format = "integer", "int32"
	case reflect.Int, reflect.Int64:
		s.Type, s.Format = "integer", "int64"
	case reflect.Slice:
		item := schemaOf(t.Elem(), path+"[]")
		s.Type, s.Items = "array", &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &item}
	case reflect.Map:
		val := schemaOf(t.Elem(), path+"{}")
		s.Type, s.AdditionalProperties = "object", &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &val}
	case reflect.Struct:
		s.Type, s.Properties = "object", map[string]apiextensionsv1.JSONSchemaProps{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || name == "" {
				continue
			}
			s.Properties[name] = schemaOf(f.Type, path+"."+name)
			if !strings.Contains(opts, "omitempty") {
				s.Required = append(s.Required, name)
			}
		}
	default:
		panic(fmt.Sprintf("crd: %s: no schema for Go kind %s", path, t.Kind()))
	}
	if c := constraints[path]; c != nil {
		c(&s)
	}
	return s
}
