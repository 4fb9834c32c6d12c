package audit

import (
	"strconv"
	"sync"
	"unicode/utf8"
)

// Bounds of what a DenialLog keeps. The sandboxed program chooses what it
// is denied, so every field it can influence is cut, and the number of
// distinct denials kept is capped: a report itemizes at most
// (DefaultMaxDistinct + MaxExtraKinds) × (MaxTargetBytes + MaxMessageBytes +
// 2×MaxSuggestionBytes + 3×maxNameBytes) ≈ 111 KiB of text (suggestion and
// hint), and at most 6 times that (670 KiB) once JSON has escaped every
// byte, however many denials happened.
const (
	DefaultMaxDistinct = 50
	// MaxExtraKinds is how many denials beyond MaxDistinct are kept because
	// they are the first of their kind (layer, op and rule): a spray of
	// distinct targets of one kind cannot hide that another kind happened.
	MaxExtraKinds      = 16
	MaxTargetBytes     = 512
	MaxMessageBytes    = 512
	MaxSuggestionBytes = 256 // each of Suggestion and Hint
	// maxNameBytes bounds Layer, Op and Rule, which airlock's own layers
	// choose; the cut is only a backstop.
	maxNameBytes = 64
	// maxLayers bounds the keys of Counts.ByLayer; further layers are
	// counted under "other".
	maxLayers = 16
)

// Truncate returns s when it has at most max bytes, else its first max
// bytes (cut back to a UTF-8 character boundary) followed by a visible
// marker such as "…[+2048 bytes]" saying how much was cut.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[+" + strconv.Itoa(len(s)-cut) + " bytes]"
}

// Tally is one distinct denial: the first Deny event with its layer, op,
// target and rule (fields truncated), and how many such events there were.
type Tally struct {
	Event
	Count int64
}

// Counts counts denials, itemized or not.
type Counts struct {
	Total   int64            // every denial
	ByLayer map[string]int64 // Total split by Event.Layer; nil when Total is 0
	// Dropped is how many of Total are not itemized in any Tally because
	// the distinct denials kept had reached their cap.
	Dropped int64
}

func (c *Counts) add(layer string, dropped bool) {
	c.Total++
	if dropped {
		c.Dropped++
	}
	if c.ByLayer == nil {
		c.ByLayer = map[string]int64{}
	}
	if _, ok := c.ByLayer[layer]; !ok && len(c.ByLayer) >= maxLayers-1 {
		layer = "other"
	}
	c.ByLayer[layer]++
}

func (c Counts) clone() Counts {
	if c.ByLayer != nil {
		m := make(map[string]int64, len(c.ByLayer))
		for k, v := range c.ByLayer {
			m[k] = v
		}
		c.ByLayer = m
	}
	return c
}

// Summary is the denials of one stretch of a run or session: the distinct
// ones in the order they first happened, and the counts of all of them.
// The counts of the tallies plus Counts.Dropped make Counts.Total.
type Summary struct {
	Denials []Tally
	Counts  Counts
}

// denialKey is what makes two denials the same.
type denialKey struct{ layer, op, target, rule string }

// kindKey is the kind of a denial: its key without the target, which the
// sandboxed program chooses.
type kindKey struct{ layer, op, rule string }

// DenialLog is a Sink that keeps a bounded summary of the Deny events it
// receives and ignores every other kind (an audit file keeps those). It
// holds the denials since the last Take, deduplicated by layer, op, target
// and rule with a count each, at most MaxDistinct of them plus the first
// of each further kind (layer, op, rule; at most MaxExtraKinds); other
// distinct denials are only counted. Targets, messages and suggestions are
// cut with Truncate. So its memory is bounded whatever the sandbox does, and a
// session takes each exec's denials (and those made between execs) once.
// The zero DenialLog is ready to use; it is safe for concurrent use.
type DenialLog struct {
	// MaxDistinct bounds the distinct denials kept between two Takes.
	// Zero or less means DefaultMaxDistinct. Set it before the first Emit.
	MaxDistinct int

	mu      sync.Mutex
	index   map[denialKey]int // guarded by mu; key -> position in tallies
	kinds   map[kindKey]bool  // guarded by mu; kinds among tallies
	extra   int               // guarded by mu; tallies kept past MaxDistinct
	tallies []Tally           // guarded by mu; since the last Take
	counts  Counts            // guarded by mu; since the last Take
	total   Counts            // guarded by mu; since the start
}

// Emit counts e when it is a Deny event, and keeps it when it is the first
// of its kind and there is room.
func (d *DenialLog) Emit(e Event) {
	if e.Kind != Deny {
		return
	}
	e.Layer = Truncate(e.Layer, maxNameBytes)
	e.Op = Truncate(e.Op, maxNameBytes)
	e.Rule = Truncate(e.Rule, maxNameBytes)
	e.Target = Truncate(e.Target, MaxTargetBytes)
	e.Message = Truncate(e.Message, MaxMessageBytes)
	e.Suggestion = Truncate(e.Suggestion, MaxSuggestionBytes)
	e.Hint = Truncate(e.Hint, MaxSuggestionBytes)
	k := denialKey{e.Layer, e.Op, e.Target, e.Rule}
	kind := kindKey{e.Layer, e.Op, e.Rule}
	limit := d.MaxDistinct
	if limit <= 0 {
		limit = DefaultMaxDistinct
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	dropped := false
	if i, ok := d.index[k]; ok {
		d.tallies[i].Count++
	} else if room, newKind := len(d.tallies) < limit, !d.kinds[kind]; room || (newKind && d.extra < MaxExtraKinds) {
		if d.index == nil {
			d.index, d.kinds = map[denialKey]int{}, map[kindKey]bool{}
		}
		if !room {
			d.extra++
		}
		d.index[k] = len(d.tallies)
		d.kinds[kind] = true
		d.tallies = append(d.tallies, Tally{Event: e, Count: 1})
	} else {
		dropped = true
	}
	d.counts.add(e.Layer, dropped)
	d.total.add(e.Layer, dropped)
}

// Take returns the denials since the last Take (or since the start) and
// starts a new stretch, releasing what it held.
func (d *DenialLog) Take() Summary {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Summary{Denials: d.tallies, Counts: d.counts}
	d.index, d.kinds, d.extra, d.tallies, d.counts = nil, nil, 0, nil, Counts{}
	return s
}

// Pending returns a copy of what the next Take would return, without
// starting a new stretch.
func (d *DenialLog) Pending() Summary {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Summary{Denials: append([]Tally(nil), d.tallies...), Counts: d.counts.clone()}
}

// Totals returns the counts of every denial since the start.
func (d *DenialLog) Totals() Counts {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total.clone()
}
