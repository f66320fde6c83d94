package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// row is one figure of a scenario on both sides, over the repetitions.
type row struct {
	scenario, metric, unit string
	order                  int
	sum                    bool
	values                 map[string][]float64 // side -> one per repetition
}

func (r *row) add(side string, m measure) {
	if r.values == nil {
		r.values = map[string][]float64{}
	}
	r.sum = m.sum
	r.values[side] = append(r.values[side], m.value)
}

// cell is a side's figure: for a count, the total over the repetitions
// (of how many); otherwise the median (min–max).
func (r *row) cell(side string) (string, float64, bool) {
	v := slices.Clone(r.values[side])
	if len(v) == 0 {
		return "-", 0, false
	}
	if r.sum {
		total := 0.0
		for _, x := range v {
			total += x
		}
		return fmt.Sprintf("%g in %d", total, len(v)), total, true
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	unit := r.unit
	if math.IsInf(med, 1) {
		unit = ""
	}
	return fmt.Sprintf("%s%s (%s–%s)", num(med), unit, num(v[0]), num(v[len(v)-1])), med, true
}

func num(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "never"
	case x == 0:
		return "0"
	case x < 10:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.1f", x)
	}
}

// table renders the results as markdown: scenario, figure, both sides and
// the ratio cle / peer of the medians (below 1: cle takes less). peer is the
// other side's name.
func (r *run) table(peer string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s. Repetitions: %d per scenario and side; %s steady-state windows. Run at %s.\n\n",
		machine(), *reps, *steady, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "| scenario | figure | cle median (min–max) | %[1]s median (min–max) | cle / %[1]s |\n", peer)
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	last := ""
	for _, row := range r.results {
		cle, c, okc := row.cell("cle")
		other, p, okp := row.cell(peer)
		ratio := "-"
		if okc && okp && !row.sum && p > 0 && !math.IsInf(c, 0) && !math.IsInf(p, 0) {
			ratio = fmt.Sprintf("%.2f", c/p)
		}
		title := row.scenario
		if title == last {
			title = ""
		}
		last = row.scenario
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", title, row.metric, cle, other, ratio)
	}
	return b.String()
}
