// devicemetadata-decode reads a DRA device metadata file (KEP-5304) the way upstream's
// readers do (k8s.io/dynamic-resource-allocation/devicemetadata), with its declarative
// validation, and prints one JSON object: the version it decoded, the validation error
// (empty when valid) and the decoded object. A stream it cannot decode exits 1 with the
// error on stderr. dralet's tests use it to check the files dralet writes.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: devicemetadata-decode FILE")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var decoded v1beta1.DeviceMetadata
	var validation error
	var gvk schema.GroupVersionKind
	err = devicemetadata.DecodeMetadataFromStream(
		json.NewDecoder(bytes.NewReader(data)),
		&decoded,
		devicemetadata.DecodeMetadataWithValidationResult(&validation),
		devicemetadata.DecodeMetadataStoreGVKResult(&gvk),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	invalid := ""
	if validation != nil {
		invalid = validation.Error()
	}
	out := map[string]any{"decoded": gvk.GroupVersion().String(), "invalid": invalid, "object": decoded}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
