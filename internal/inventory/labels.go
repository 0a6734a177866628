package inventory

import (
	"context"
	"maps"
)

// LabelledSource adds Labels to every node inventory its Source collects: the
// node agent's --label flags. A label of the same key already on a node (from
// a static inventory file) is overridden.
type LabelledSource struct {
	Source Source
	Labels map[string]string // checked with CheckLabels by whoever builds it
}

// Collect collects from the wrapped source and labels every node. It returns
// the wrapped source's error unchanged.
func (s LabelledSource) Collect(ctx context.Context) ([]NodeInventory, error) {
	nodes, err := s.Source.Collect(ctx)
	if err != nil {
		return nil, err
	}
	if len(s.Labels) == 0 {
		return nodes, nil
	}
	for i := range nodes {
		merged := maps.Clone(nodes[i].Labels)
		if merged == nil {
			merged = make(map[string]string, len(s.Labels))
		}
		maps.Copy(merged, s.Labels)
		nodes[i].Labels = merged
	}
	return nodes, nil
}
