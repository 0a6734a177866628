package alibaba

import "github.com/gpugov/gpugov/internal/vocab"

// NodeRow is one row of a node list (openb_node_list_gpu_node.csv or
// openb_node_list_all_node.csv).
type NodeRow struct {
	SN        string // node ID, unique in the file
	CPUMilli  int64  // CPU capacity in milli-cores
	MemoryMiB int64  // host memory in MiB
	GPUs      int    // number of GPUs on the node (0 for CPU-only nodes)
	Model     string // GPU model, one of KnownModels (or ReadOptions.Models); "" exactly when GPUs is 0
	Line      int    // line of the row in its file
}

// ReadNodes reads and validates a node list. Every row must have the five
// columns sn,cpu_milli,memory_mib,gpu,model; a unique non-empty sn;
// non-negative integers; and a model from KnownModels when gpu > 0 (empty when
// gpu is 0). The first problem is returned as a *ParseError
// ("file:line: what is wrong"); a file that cannot be opened returns the
// os error.
func ReadNodes(path string) ([]NodeRow, error) { return ReadNodesWith(path, ReadOptions{}) }

// ReadNodesWith is ReadNodes accepting opts.Models besides KnownModels
// (opts.SkipInvalid does not apply: a node list is read whole or not at all).
func ReadNodesWith(path string, opts ReadOptions) ([]NodeRow, error) {
	var nodes []NodeRow
	seen := map[string]int{}
	_, err := readRows(path, nodeHeader, false, func(c *csvFile, rec []string) error {
		n, err := parseNode(c, rec, opts)
		if err != nil {
			return err
		}
		if first, dup := seen[n.SN]; dup {
			return c.errorf("sn %q repeats the node of line %d", n.SN, first)
		}
		seen[n.SN] = n.Line
		nodes = append(nodes, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return nodes, nil
}

func parseNode(c *csvFile, rec []string, opts ReadOptions) (NodeRow, error) {
	n := NodeRow{SN: rec[0], Model: rec[4], Line: c.line}
	if n.SN == "" {
		return n, c.errorf("sn is empty")
	}
	var err error
	if n.CPUMilli, err = c.nonNegInt("cpu_milli", rec[1], vocab.MaxCPUMilli); err != nil {
		return n, err
	}
	if n.MemoryMiB, err = c.nonNegInt("memory_mib", rec[2], vocab.MaxMemoryMiB); err != nil {
		return n, err
	}
	gpus, err := c.nonNegInt("gpu", rec[3], vocab.MaxGPUsPerNode)
	if err != nil {
		return n, err
	}
	n.GPUs = int(gpus)
	switch {
	case n.GPUs == 0 && n.Model != "":
		return n, c.errorf("model %q given for a node with gpu 0", n.Model)
	case n.GPUs > 0 && n.Model == "":
		return n, c.errorf("model is empty for a node with gpu %d", n.GPUs)
	case n.GPUs > 0 && !opts.knownModel(n.Model):
		return n, c.errorf("unknown GPU model %q (known: %v)", n.Model, opts.models())
	}
	return n, nil
}
