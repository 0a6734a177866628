package static

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/yamlnode"
)

// Parse validates the YAML text of an inventory file; name is used in error
// messages (normally the file's path). It returns every problem found, joined,
// each as "NAME:LINE: PATH message".
func Parse(name string, data []byte) (*Inventory, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(name, err)
	}
	p := &parser{file: name, uuids: map[string]string{}, nodes: map[string]string{}, pools: map[string]string{}}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty; want a mapping with a pools list", name)
	}
	pools := p.parseRoot(doc.Content[0])
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return &Inventory{Path: name, Pools: pools}, nil
}

// yamlLine finds the line number yaml.v3 puts in its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError rewrites "yaml: line 5: msg" as "NAME:5: msg", with the line
// yamlnode.Syntax corrects; an error yaml.v3 gives without a line (control
// characters, bad UTF-8) is put at line 1, as the policy loader does, so
// that every problem names NAME:LINE.
func syntaxError(name string, err error) error {
	se := yamlnode.Syntax(err)
	if m := yamlLine.FindStringSubmatch(se.Msg); m != nil {
		return fmt.Errorf("%s:%s: %s", name, m[1], m[2])
	}
	return fmt.Errorf("%s:%d: %w", name, se.Line, se)
}

// parser walks the YAML node tree, collecting problems with their line numbers.
type parser struct {
	file  string
	errs  []error
	pools map[string]string // pool name → path where first seen
	nodes map[string]string // node name → path where first seen
	uuids map[string]string // GPU UUID → path where first seen
}

// errorf records a problem at n's line.
func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s %s", p.file, n.Line, path, fmt.Sprintf(format, args...)))
}

// mapping checks that n is a mapping whose keys are all in allowed, and returns
// its values by key. It returns nil when n is not a mapping.
func (p *parser) mapping(n *yaml.Node, path string, allowed ...string) map[string]*yaml.Node {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "must be a mapping with keys %v", allowed)
		return nil
	}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if !slices.Contains(allowed, key.Value) {
			p.errorf(key, path, "has unknown key %q (want one of %v)", key.Value, allowed)
			continue
		}
		fields[key.Value] = value
	}
	return fields
}

// sequence returns the items of the required, non-empty list under key of
// fields; parent is where to report a missing key.
func (p *parser) sequence(parent *yaml.Node, fields map[string]*yaml.Node, key, path string) []*yaml.Node {
	n, ok := fields[key]
	if !ok {
		p.errorf(parent, path, "is missing (want a list of at least one item)")
		return nil
	}
	n = resolve(n)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.errorf(n, path, "must be a list of at least one item")
		return nil
	}
	return n.Content
}

// requiredString returns the non-empty string under key.
func (p *parser) requiredString(parent *yaml.Node, fields map[string]*yaml.Node, key, path string) string {
	n, ok := fields[key]
	if !ok {
		p.errorf(parent, path, "is missing")
		return ""
	}
	s := p.str(n, path)
	if s == "" {
		p.errorf(n, path, "must not be empty")
	}
	return s
}

// str returns the string scalar n, or records that it is not one.
func (p *parser) str(n *yaml.Node, path string) string {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, path, "must be a string")
		return ""
	}
	return n.Value
}

// integer returns the integer under key (0 when absent), recording a problem
// when it is not an integer or is outside lowest..highest (vocab's bounds).
func (p *parser) integer(fields map[string]*yaml.Node, key, path string, lowest, highest int64, required bool, parent *yaml.Node) int64 {
	n, ok := fields[key]
	if !ok {
		if required {
			p.errorf(parent, path, "is missing")
		}
		return 0
	}
	n = resolve(n)
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, path, "must be an integer, got %q", n.Value)
		return 0
	}
	switch {
	case v < lowest && lowest == 1:
		p.errorf(n, path, "must be > 0, got %d", v)
	case v < lowest:
		p.errorf(n, path, "must be >= %d, got %d", lowest, v)
	case v > highest:
		p.errorf(n, path, "must be at most %d, got %d", highest, v)
	}
	return v
}

// boolean returns the boolean under key, or def when absent.
func (p *parser) boolean(fields map[string]*yaml.Node, key, path string, def bool) bool {
	n, ok := fields[key]
	if !ok {
		return def
	}
	n = resolve(n)
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		p.errorf(n, path, "must be true or false, got %q", n.Value)
		return def
	}
	return v
}

// unique records that value (a name or UUID) at path is a duplicate when seen
// already in the same namespace.
func (p *parser) unique(seen map[string]string, n *yaml.Node, value, path string) {
	if value == "" {
		return
	}
	if first, dup := seen[value]; dup {
		p.errorf(n, path, "%q is a duplicate of %s", value, first)
		return
	}
	seen[value] = fmt.Sprintf("%s (line %d)", path, n.Line)
}

func (p *parser) parseRoot(root *yaml.Node) []scheduling.Pool {
	fields := p.mapping(root, "(top level)", "pools")
	if fields == nil {
		return nil
	}
	var pools []scheduling.Pool
	for i, item := range p.sequence(root, fields, "pools", "pools") {
		pools = append(pools, p.parsePool(item, fmt.Sprintf("pools[%d]", i)))
	}
	return pools
}

func (p *parser) parsePool(n *yaml.Node, path string) scheduling.Pool {
	pool := scheduling.Pool{Available: true, Stage: vocab.StageObserve}
	fields := p.mapping(n, path, "name", "nodes")
	if fields == nil {
		return pool
	}
	pool.Name = p.requiredString(n, fields, "name", path+".name")
	if v, ok := fields["name"]; ok {
		p.unique(p.pools, v, pool.Name, path+".name")
	}
	for i, item := range p.sequence(n, fields, "nodes", path+".nodes") {
		pool.Nodes = append(pool.Nodes, p.parseNode(item, fmt.Sprintf("%s.nodes[%d]", path, i)))
	}
	return pool
}

func (p *parser) parseNode(n *yaml.Node, path string) scheduling.Node {
	node := scheduling.Node{Schedulable: true}
	fields := p.mapping(n, path, "name", "cpu_milli", "memory_mib", "labels", "gpus")
	if fields == nil {
		return node
	}
	node.Name = p.requiredString(n, fields, "name", path+".name")
	if v, ok := fields["name"]; ok {
		p.unique(p.nodes, v, node.Name, path+".name")
	}
	node.CPUMilli = p.integer(fields, "cpu_milli", path+".cpu_milli", 0, vocab.MaxCPUMilli, false, n)
	node.MemoryMiB = p.integer(fields, "memory_mib", path+".memory_mib", 0, vocab.MaxMemoryMiB, false, n)
	if v, ok := fields["labels"]; ok {
		node.Labels = p.labels(v, path+".labels")
	}
	gpus := p.sequence(n, fields, "gpus", path+".gpus")
	if len(gpus) > vocab.MaxGPUsPerNode {
		p.errorf(fields["gpus"], path+".gpus", "lists %d GPUs, at most %d per node", len(gpus), vocab.MaxGPUsPerNode)
		return node
	}
	for i, item := range gpus {
		node.GPUs = append(node.GPUs, p.parseGPU(item, fmt.Sprintf("%s.gpus[%d]", path, i)))
	}
	return node
}

func (p *parser) parseGPU(n *yaml.Node, path string) scheduling.GPU {
	gpu := scheduling.GPU{Healthy: true}
	fields := p.mapping(n, path, "uuid", "model", "memory_mib", "nvlink_domain", "healthy")
	if fields == nil {
		return gpu
	}
	gpu.UUID = p.requiredString(n, fields, "uuid", path+".uuid")
	if v, ok := fields["uuid"]; ok {
		p.unique(p.uuids, v, gpu.UUID, path+".uuid")
	}
	gpu.Model = p.requiredString(n, fields, "model", path+".model")
	gpu.MemoryMiB = p.integer(fields, "memory_mib", path+".memory_mib", 1, vocab.MaxGPUMemoryMiB, true, n)
	if v, ok := fields["nvlink_domain"]; ok {
		gpu.NVLinkDomain = p.str(v, path+".nvlink_domain")
	}
	gpu.Healthy = p.boolean(fields, "healthy", path+".healthy", true)
	return gpu
}

// labels returns the node labels under n: a mapping of non-empty string keys
// to non-empty string values within inventory.CheckLabels' limits. A value
// YAML would read as another type (true, 10) must be quoted.
func (p *parser) labels(n *yaml.Node, path string) map[string]string {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "must be a mapping of label names to string values, e.g. {network: infiniband}")
		return nil
	}
	out := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := resolve(n.Content[i]), resolve(n.Content[i+1])
		if key.Kind != yaml.ScalarNode || key.Tag != "!!str" {
			p.errorf(key, path, "has a key that is not a string: %q", key.Value)
			continue
		}
		kp := path + "." + key.Value
		if _, dup := out[key.Value]; dup {
			p.errorf(key, kp, "is listed twice")
			continue
		}
		if value.Kind != yaml.ScalarNode || value.Tag != "!!str" {
			p.errorf(value, kp, "must be a string (quote values such as \"true\" or \"10\"), got %q", value.Value)
			continue
		}
		out[key.Value] = value.Value
	}
	if k, err := inventory.CheckLabels(out); err != nil {
		at := path
		if k != "" {
			at += "." + k
		}
		p.errorf(n, at, "%v", err)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// resolve follows YAML aliases (*name) to the node they refer to.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}
