package kubectlcle

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// ValidateOutput checks an -o value.
func ValidateOutput(o string) error {
	switch o {
	case OutputTable, OutputWide, OutputJSON, OutputYAML:
		return nil
	default:
		return fmt.Errorf("unsupported output format %q: want one of wide, json, yaml", o)
	}
}

// statusList is what -o json|yaml prints for status.
type statusList struct {
	Items []LeaseStatus `json:"items"`
}

// PrintStatus prints status rows in format output. allNamespaces adds the
// NAMESPACE column, as kubectl does with -A.
func PrintStatus(w io.Writer, rows []LeaseStatus, output string, allNamespaces bool, now time.Time) error {
	if rows == nil {
		rows = []LeaseStatus{}
	}
	switch output {
	case OutputJSON, OutputYAML:
		return printStructured(w, statusList{Items: rows}, output)
	}
	tw := printers.GetNewTabWriter(w)
	header := []string{"LEASE", "STRATEGY", "HOLDER", "PREFERRED", "BEST", "CANDIDATES", "TERM", "STATE", "AGE"}
	if allNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if output == OutputWide {
		header = append(header, "RENEWED", "MODE", "WHY")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cols := []string{r.Name, none(r.Strategy), none(r.Holder), none(r.PreferredHolder), none(r.Best),
			strconv.Itoa(r.Candidates), strconv.Itoa(int(r.Term)), string(r.State), "<none>"}
		if r.Created != nil {
			cols[8] = age(r.Created.Time, now)
		}
		if allNamespaces {
			cols = append([]string{r.Namespace}, cols...)
		}
		if output == OutputWide {
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

// PrintDescription prints what describe shows, in format output (wide is
// the same as the default).
func PrintDescription(w io.Writer, d LeaseDescription, output string, now time.Time) error {
	switch output {
	case OutputJSON, OutputYAML:
		return printStructured(w, d, output)
	}
	s := d.Status
	tw := printers.GetNewTabWriter(w)
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }
	field("Lease", s.Namespace+"/"+s.Name)
	field("API mode", string(s.APIMode))
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

func printStructured(w io.Writer, v any, output string) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", output, err)
	}
	if output == OutputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encode %s: %w", output, err)
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
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
