package kubectlcle

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
)

// The -o values kubectl cle handles itself; every other one (json, yaml,
// jsonpath=..., go-template=..., ...) goes to a cli-runtime printer.
const (
	// OutputTable is the default: a table (status), text (describe) or
	// one line per change (watch).
	OutputTable = ""
	// OutputWide adds columns to the status table.
	OutputWide = "wide"
	// OutputName prints lease.coordination.k8s.io/NAME per Lease, as
	// `kubectl get -o name` does, to pipe into kubectl.
	OutputName = "name"
)

// Format is how a command prints.
type Format struct {
	// Output is the -o value.
	Output string
	// NoHeaders leaves out the table's header, and the election controller
	// line above it.
	NoHeaders bool
	// Printer prints objects, for every Output but OutputTable and
	// OutputWide (for which it is nil). With OutputName it is given the
	// Leases themselves (see LeaseRef).
	Printer printers.ResourcePrinter
}

// leaseGVK is what -o name names a Lease by.
var leaseGVK = coordinationv1.SchemeGroupVersion.WithKind("Lease")

// LeaseRef is the Lease of a row, as -o name prints it:
// lease.coordination.k8s.io/NAME.
func LeaseRef(r *LeaseStatus) runtime.Object {
	ref := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}}
	ref.SetGroupVersionKind(leaseGVK)
	return ref
}

// PrintStatus prints the status list in format f. allNamespaces adds the
// NAMESPACE column, as kubectl does with -A.
func PrintStatus(w io.Writer, list *LeaseStatusList, f Format, allNamespaces bool, now time.Time) error {
	switch {
	case f.Printer != nil && f.Output == OutputName:
		// A name printer takes no lists but unstructured ones.
		for i := range list.Items {
			if err := f.Printer.PrintObj(LeaseRef(&list.Items[i]), w); err != nil {
				return err
			}
		}
		return nil
	case f.Printer != nil:
		return f.Printer.PrintObj(list, w)
	}
	if !f.NoHeaders && list.ElectionController != nil {
		if _, err := fmt.Fprintf(w, "Election controller: %s\n", list.ElectionController.Summary(now)); err != nil {
			return err
		}
		if cs := list.ElectionController.CleStrategies; cs != nil {
			if _, err := fmt.Fprintf(w, "Election controller of cle.dev strategies: %s\n", cs.Summary(now)); err != nil {
				return err
			}
		}
	}
	if len(list.Items) == 0 {
		return nil
	}
	wide := f.Output == OutputWide
	tw := printers.GetNewTabWriter(w)
	if !f.NoHeaders {
		header := []string{"LEASE", "STRATEGY", "HOLDER", "PREFERRED", "BEST", "CANDIDATES", "TERM", "STATE", "AGE"}
		if allNamespaces {
			header = append([]string{"NAMESPACE"}, header...)
		}
		if wide {
			header = append(header, "RENEWED", "MODE", "WHY")
		}
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range list.Items {
		cols := []string{r.Name, none(r.Strategy), none(r.Holder), none(r.PreferredHolder), none(r.Best),
			strconv.Itoa(r.Candidates), strconv.Itoa(int(r.Term)), string(r.State), "<none>"}
		if r.Created != nil {
			cols[8] = age(r.Created.Time, now)
		}
		if allNamespaces {
			cols = append([]string{r.Namespace}, cols...)
		}
		if wide {
			renewed := "<none>"
			if r.RenewTime != nil {
				renewed = age(r.RenewTime.Time, now)
			}
			cols = append(cols, renewed, string(r.APIMode), r.Why)
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	return tw.Flush()
}

// PrintDescription prints what describe shows, in format f.
func PrintDescription(w io.Writer, d *LeaseDescription, f Format, now time.Time) error {
	switch {
	case f.Printer != nil && f.Output == OutputName:
		return f.Printer.PrintObj(LeaseRef(&d.Status), w)
	case f.Printer != nil:
		return f.Printer.PrintObj(d, w)
	}
	s := d.Status
	tw := printers.GetNewTabWriter(w)
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }
	field("Lease", s.Namespace+"/"+s.Name)
	field("API mode", string(s.APIMode))
	if d.ElectionController != nil {
		field("Election controller", d.ElectionController.Summary(now))
		if cs := d.ElectionController.CleStrategies; cs != nil {
			field("Election controller of cle.dev strategies", cs.Summary(now))
		}
	}
	field("Strategy", none(s.Strategy))
	field("State", string(s.State))
	holder := none(s.Holder)
	if s.Holder != "" {
		holder += fmt.Sprintf(" (term %d", s.Term)
		if s.RenewTime != nil {
			holder += ", renewed " + age(s.RenewTime.Time, now) + " ago"
		}
		holder += ")"
	}
	field("Holder", holder)
	field("Preferred holder", none(s.PreferredHolder))
	field("Best", none(s.Best))
	field("Why", s.Why)
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "Candidates:")
	if len(d.Candidates) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		tw = printers.GetNewTabWriter(w)
		fmt.Fprintln(tw, "  RANK\tNAME\tEMULATION\tBINARY\tSTRATEGY\tRENEWED\tPING\tROLE")
		for i := range d.Candidates {
			c := &d.Candidates[i]
			rank := "-"
			if c.Rank > 0 {
				rank = strconv.Itoa(c.Rank)
			}
			role := strings.Join(c.Roles, ",")
			if c.Excluded != "" {
				role = strings.Join(append(c.Roles, c.Excluded), ",")
			}
			strategy := c.Strategy
			if c.Priority != "" {
				strategy += " (priority " + c.Priority + ")"
			}
			ping := none(c.Ping)
			if c.Ping == "pending" && c.PingTime != nil {
				ping += " " + age(c.PingTime.Time, now)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rank, c.Name, none(c.EmulationVersion), none(c.BinaryVersion),
				none(strategy), candidateAge(c, now), ping, none(role))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if err := printGroup(w, d.Group, now); err != nil {
		return err
	}

	fmt.Fprintln(w, "Events:")
	if len(d.Events) == 0 {
		fmt.Fprintln(w, "  <none>")
		return nil
	}
	tw = printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "  AGE\tTYPE\tREASON\tFROM\tMESSAGE")
	for _, e := range d.Events {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", age(e.Time.Time, now), e.Type, e.Reason, none(e.From), e.Message)
	}
	return tw.Flush()
}

func none(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// age formats how long before now t was, as kubectl prints ages.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// printGroup prints a shard group's assignment and members (nothing for
// nil).
func printGroup(w io.Writer, g *GroupStatus, now time.Time) error {
	if g == nil {
		return nil
	}
	fmt.Fprintf(w, "Shards: %d (generation %d): %d owned, %d moving, %d unowned, spread %d\n",
		g.Count, g.Generation, g.Owned, g.Moving, g.Unowned, g.Spread)
	if g.UnownedShards != "" {
		fmt.Fprintf(w, "  unowned: %s\n", g.UnownedShards)
	}
	fmt.Fprintln(w, "Members:")
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "  NAME\tEPOCH\tOWNED\tSHARDS\tACTING\tRELEASED\tMEMBER LEASE\tDECLARED")
	for _, m := range g.Members {
		epoch := "-"
		if m.Epoch > 0 {
			epoch = strconv.FormatInt(m.Epoch, 10)
		}
		lease := "<none>"
		switch {
		case m.RenewTime != nil && m.LeaseHolder == "":
			lease = fmt.Sprintf("released (epoch %d)", m.LeaseEpoch)
		case m.RenewTime != nil:
			lease = fmt.Sprintf("epoch %d, renewed %s ago", m.LeaseEpoch, age(m.RenewTime.Time, now))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", m.Name, epoch, m.Owned, none(m.Shards), none(m.Acting), none(m.Released), lease, none(m.Declared))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(g.Moves) > 0 {
		fmt.Fprintln(w, "Moving:")
		tw = printers.GetNewTabWriter(w)
		fmt.Fprintln(tw, "  SHARD\tFROM\tTO")
		for _, m := range g.Moves {
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", m.Shard, m.From, none(m.To))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "Tokens:")
	tw = printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "  SHARDS\tTOKEN")
	for _, t := range g.Tokens {
		fmt.Fprintf(tw, "  %s\t%d\n", t.Shards, t.Token)
	}
	return tw.Flush()
}
