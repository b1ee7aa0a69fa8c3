package main

import (
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"
)

// verifySpecFiles reads verify's --config: a derivation spec file (its
// derivations: is a list of derivations), or the daemon's config file (its
// derivations: is a list of spec files, read as serve reads them), so that
// CI can check what the daemon checks with the file the daemon runs on.
func verifySpecFiles(config string) ([]string, error) {
	b, err := os.ReadFile(config)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return []string{config}, nil // the spec parser reports what is wrong with it
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != "derivations" {
			continue
		}
		seq := m.Content[i+1]
		if seq.Kind != yaml.SequenceNode || len(seq.Content) == 0 {
			return []string{config}, nil
		}
		var files []string
		for _, it := range seq.Content {
			if it.Kind != yaml.ScalarNode {
				return []string{config}, nil // a list of derivations: a spec file
			}
			files = append(files, it.Value)
		}
		return files, nil
	}
	return nil, fmt.Errorf("%s has no derivations: neither a derivation spec file nor a daemon config that names some", config)
}
