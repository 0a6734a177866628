package queuereport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// summaryMagic starts a Summary's binary form; its last byte is the format
// version, changed whenever the layout or the meaning of a field changes so
// that stored summaries of an older version are recomputed, not misread.
var summaryMagic = [4]byte{'Q', 'R', 'S', 3}

// SummaryFormat returns the first bytes of every summary MarshalBinary
// writes in this version, so that a store can drop summaries of another
// version without decoding them.
func SummaryFormat() []byte { return summaryMagic[:] }

// MarshalBinary encodes the summary compactly (varints; samples as
// differences of sorted values; group values, dimensions and reasons through
// a string table), for storing summaries of past segments. It never fails.
func (s *Summary) MarshalBinary() ([]byte, error) {
	e := &sumEncoder{idx: map[string]int{}}
	for _, g := range s.groups {
		for _, v := range g.key {
			e.intern(v)
		}
		for _, r := range g.reasons {
			e.intern(r.reason)
		}
	}
	for _, d := range s.dims {
		for _, v := range d {
			e.intern(v)
		}
	}
	e.buf = append(e.buf, summaryMagic[:]...)
	e.varint(s.from)
	e.varint(s.to)
	e.varint(s.minWait)
	e.uvarint(uint64(len(s.groupBy)))
	for _, k := range s.groupBy {
		e.str(k)
	}
	e.uvarint(uint64(len(e.table)))
	for _, v := range e.table {
		e.str(v)
	}
	e.uvarint(uint64(len(s.groups)))
	for i := range s.groups {
		e.group(&s.groups[i])
	}
	e.uvarint(uint64(len(s.dims)))
	for _, d := range s.dims {
		for _, v := range d {
			e.ref(v)
		}
	}
	e.uvarint(uint64(len(s.waits)))
	for i := range s.waits {
		e.wait(&s.waits[i])
	}
	return e.buf, nil
}

// sumEncoder appends a summary's fields to buf.
type sumEncoder struct {
	buf   []byte
	table []string
	idx   map[string]int
}

func (e *sumEncoder) intern(v string) {
	if _, ok := e.idx[v]; !ok {
		e.idx[v] = len(e.table)
		e.table = append(e.table, v)
	}
}

func (e *sumEncoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *sumEncoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }
func (e *sumEncoder) count(n int)      { e.uvarint(uint64(n)) }
func (e *sumEncoder) ref(v string)     { e.uvarint(uint64(e.idx[v])) }

func (e *sumEncoder) str(v string) {
	e.uvarint(uint64(len(v)))
	e.buf = append(e.buf, v...)
}

func (e *sumEncoder) sec(a secAcc) {
	e.varint(a.sec)
	e.varint(a.ns)
}

// samples writes sorted values as their count, the first and the gaps.
func (e *sumEncoder) samples(vs []int64) {
	e.count(len(vs))
	prev := int64(0)
	for i, v := range vs {
		if i == 0 {
			e.varint(v)
		} else {
			e.uvarint(uint64(v - prev))
		}
		prev = v
	}
}

func (e *sumEncoder) waitRef(w waitRef) {
	e.str(w.job)
	if w.job != "" {
		e.varint(w.length)
		e.varint(w.start)
	}
}

func (e *sumEncoder) group(g *sumGroup) {
	for _, v := range g.key {
		e.ref(v)
	}
	for _, n := range []int{g.alive, g.zeroAtFrom, g.submitted, g.cancelled, g.waitsEnded, g.cww, g.ongoing} {
		e.count(n)
	}
	e.sec(g.gpu)
	e.count(len(g.reasons))
	for _, r := range g.reasons {
		e.ref(r.reason)
		e.sec(r.sec)
		e.sec(r.gpu)
	}
	e.samples(g.initial)
	e.samples(g.requeue)
	e.waitRef(g.bestClosed)
	e.waitRef(g.bestOngoing)
}

func (e *sumEncoder) wait(w *sumWait) {
	e.str(w.job)
	e.uvarint(uint64(w.dims))
	e.varint(w.start)
	flags := uint64(0)
	if w.end != noTime {
		flags |= 1
	}
	if w.requeue {
		flags |= 2
	}
	e.uvarint(flags)
	if w.end != noTime {
		e.varint(w.end - w.start)
	}
	e.uvarint(uint64(w.ot))
	e.uvarint(uint64(w.rel))
	e.uvarint(uint64(w.arr))
}

// errSummaryCorrupt is returned for a binary form that ends early or holds an
// impossible value.
var errSummaryCorrupt = errors.New("queuereport: corrupt summary")

// UnmarshalBinary decodes what MarshalBinary wrote. It returns an error for
// another format version or corrupt data.
func (s *Summary) UnmarshalBinary(b []byte) error {
	if len(b) < len(summaryMagic) || [4]byte(b[:4]) != summaryMagic {
		return fmt.Errorf("queuereport: not a summary of format %d", summaryMagic[3])
	}
	d := &sumDecoder{buf: b[4:], whole: string(b[4:])}
	out := Summary{from: d.varint(), to: d.varint(), minWait: d.varint()}
	out.groupBy = make([]string, d.count(len(GroupKeys)))
	for i := range out.groupBy {
		out.groupBy[i] = d.str()
	}
	d.table = make([]string, d.count(len(d.buf)))
	for i := range d.table {
		d.table[i] = d.str()
	}
	out.groups = make([]sumGroup, d.count(len(d.buf)))
	for i := range out.groups {
		d.group(&out.groups[i])
	}
	out.dims = make([][5]string, d.count(len(d.buf)))
	for i := range out.dims {
		for k := range out.dims[i] {
			out.dims[i][k] = d.ref()
		}
	}
	d.ndims = len(out.dims)
	out.waits = make([]sumWait, d.count(len(d.buf)))
	for i := range out.waits {
		d.wait(&out.waits[i])
	}
	if d.err != nil || len(d.buf) != 0 || !slices.IsSortedFunc(out.groupBy, compareGroupKeyNames) ||
		!slices.IsSortedFunc(out.waits, func(a, b sumWait) int { return compareWaits(&a, &b) }) {
		return errSummaryCorrupt
	}
	*s = out
	return nil
}

// compareGroupKeyNames orders group-by keys canonically (an unknown key
// sorts last).
func compareGroupKeyNames(a, b string) int {
	ia, ib := slices.Index(GroupKeys, a), slices.Index(GroupKeys, b)
	if ia < 0 {
		ia = len(GroupKeys)
	}
	if ib < 0 {
		ib = len(GroupKeys)
	}
	return ia - ib
}

// sumDecoder reads a summary's fields; after the first error every read
// returns zero and err stays set. Strings are slices of whole, one copy of
// the input, rather than an allocation each.
type sumDecoder struct {
	buf   []byte
	whole string
	table []string
	ndims int
	err   error
}

func (d *sumDecoder) fail() {
	d.err, d.buf = errSummaryCorrupt, nil
}

func (d *sumDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *sumDecoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// count reads a length that cannot exceed limit (what is left to read bounds
// every list, so a corrupt length cannot allocate much).
func (d *sumDecoder) count(limit int) int {
	v := d.uvarint()
	if v > uint64(limit) {
		d.fail()
		return 0
	}
	return int(v)
}

func (d *sumDecoder) str() string {
	n := d.count(len(d.buf))
	off := len(d.whole) - len(d.buf)
	d.buf = d.buf[n:]
	return d.whole[off : off+n]
}

func (d *sumDecoder) ref() string {
	i := d.count(len(d.table))
	if i >= len(d.table) {
		d.fail()
		return ""
	}
	return d.table[i]
}

func (d *sumDecoder) sec() secAcc {
	a := secAcc{sec: d.varint(), ns: d.varint()}
	if a.ns < 0 || a.ns >= nsPerSec {
		d.fail()
	}
	return a
}

func (d *sumDecoder) samples() []int64 {
	n := d.count(len(d.buf))
	if n == 0 {
		return nil
	}
	out := make([]int64, n)
	out[0] = d.varint()
	for i := 1; i < n; i++ {
		out[i] = out[i-1] + int64(d.uvarint())
	}
	return out
}

func (d *sumDecoder) waitRef() waitRef {
	w := waitRef{job: d.str()}
	if w.job != "" {
		w.length, w.start = d.varint(), d.varint()
	}
	return w
}

func (d *sumDecoder) group(g *sumGroup) {
	for i := range g.key {
		g.key[i] = d.ref()
	}
	for _, p := range []*int{&g.alive, &g.zeroAtFrom, &g.submitted, &g.cancelled, &g.waitsEnded, &g.cww, &g.ongoing} {
		*p = int(d.uvarint())
	}
	g.gpu = d.sec()
	if n := d.count(len(d.buf)); n > 0 {
		g.reasons = make([]reasonSec, n)
		for i := range g.reasons {
			g.reasons[i] = reasonSec{reason: d.ref(), sec: d.sec(), gpu: d.sec()}
		}
	}
	g.initial, g.requeue = d.samples(), d.samples()
	g.bestClosed, g.bestOngoing = d.waitRef(), d.waitRef()
}

func (d *sumDecoder) wait(w *sumWait) {
	w.job = d.str()
	w.dims = int32(d.count(d.ndims))
	if int(w.dims) >= d.ndims {
		d.fail()
	}
	w.start = d.varint()
	flags := d.uvarint()
	w.end, w.requeue = noTime, flags&2 != 0
	if flags&1 != 0 {
		w.end = w.start + d.varint()
	}
	w.ot, w.rel, w.arr = int32(d.uvarint()), int32(d.uvarint()), int32(d.uvarint())
}
