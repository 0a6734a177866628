package service

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpugov/gpugov/internal/inventory/static"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/store"
)

// Inventory file formats accepted by LoadInventoryFile.
const (
	FormatAuto       = "auto"        // by extension (.yaml, .yml, .csv), else by the first line
	FormatYAML       = "yaml"        // internal/inventory/static's YAML
	FormatAlibabaCSV = "alibaba-csv" // an Alibaba v2023 node list (sn,cpu_milli,memory_mib,gpu,model)
)

// InventoryFormats lists the accepted format names.
var InventoryFormats = []string{FormatAuto, FormatYAML, FormatAlibabaCSV}

// alibabaNodeHeader starts the first line of an Alibaba node list.
const alibabaNodeHeader = "sn,cpu_milli,memory_mib,gpu,model"

// LoadInventoryFile reads an inventory file into pools.
//
// A YAML file (internal/inventory/static) keeps its pools; a non-empty pool
// selects that one pool of the file. An Alibaba node list becomes one pool
// named pool (alibaba.DefaultPoolName when empty) holding every node with
// GPUs, as alibaba.Pools builds it (synthetic GPU UUIDs, assumed memory of
// undisclosed models, stage observe).
//
// Errors: an unknown format, an unreadable file, or the file's problems as
// "file:line: what is wrong" (the readers' own messages); a pool the YAML
// file does not have.
func LoadInventoryFile(path, format, pool string) ([]scheduling.Pool, error) {
	format, err := detectFormat(path, format)
	if err != nil {
		return nil, err
	}
	if format == FormatAlibabaCSV {
		nodes, err := alibaba.ReadNodes(path)
		if err != nil {
			return nil, err
		}
		return alibaba.Pools(nodes, alibaba.PoolOptions{Name: pool}), nil
	}
	inv, err := static.Load(path)
	if err != nil {
		return nil, err
	}
	if pool == "" {
		return inv.Pools, nil
	}
	for _, p := range inv.Pools {
		if p.Name == pool {
			return []scheduling.Pool{p}, nil
		}
	}
	names := make([]string, len(inv.Pools))
	for i, p := range inv.Pools {
		names[i] = p.Name
	}
	return nil, fmt.Errorf("%s: no pool %q in the file (it has: %s)", path, pool, strings.Join(names, ", "))
}

// detectFormat resolves FormatAuto (or "") by the file's extension, then by
// whether its first line is the Alibaba node-list header.
func detectFormat(path, format string) (string, error) {
	switch format {
	case FormatYAML, FormatAlibabaCSV:
		return format, nil
	case "", FormatAuto:
	default:
		return "", fmt.Errorf("unknown inventory format %q (want %s)", format, strings.Join(InventoryFormats, ", "))
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return FormatYAML, nil
	case ".csv":
		return FormatAlibabaCSV, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading inventory file: %w", err)
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(line, "\ufeff")), alibabaNodeHeader) {
		return FormatAlibabaCSV, nil
	}
	return FormatYAML, nil
}

// PoolCounts summarises one pool: nodes, GPUs and GPUs per model.
type PoolCounts struct {
	Pool    string
	Nodes   int
	GPUs    int
	ByModel map[string]int
}

// CountPool counts p's nodes and GPUs.
func CountPool(p scheduling.Pool) PoolCounts {
	c := PoolCounts{Pool: p.Name, Nodes: len(p.Nodes), ByModel: map[string]int{}}
	for _, n := range p.Nodes {
		c.GPUs += len(n.GPUs)
		for _, g := range n.GPUs {
			c.ByModel[g.Model]++
		}
	}
	return c
}

// String renders the counts as "pool P: N nodes, G GPUs (model count, …)",
// models by descending count then name.
func (c PoolCounts) String() string {
	models := slices.Sorted(maps.Keys(c.ByModel))
	slices.SortStableFunc(models, func(a, b string) int { return c.ByModel[b] - c.ByModel[a] })
	parts := make([]string, len(models))
	for i, m := range models {
		parts[i] = fmt.Sprintf("%s %d", m, c.ByModel[m])
	}
	return fmt.Sprintf("pool %s: %d nodes, %d GPUs (%s)", c.Pool, c.Nodes, c.GPUs, strings.Join(parts, ", "))
}

// EnsureDefaultQueues creates DefaultQueues when the store holds no queue at
// all and reports whether it did; configured queues are never touched.
// It returns the store's error.
func EnsureDefaultQueues(ctx context.Context, st *store.Store) (bool, error) {
	qs, err := st.ListQueues(ctx)
	if err != nil || len(qs) > 0 {
		return false, err
	}
	if err := st.UpsertQueues(ctx, DefaultQueues()); err != nil {
		return false, err
	}
	return true, nil
}
