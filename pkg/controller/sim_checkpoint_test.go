package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var simCheckpoint = flag.String("sim.checkpoint", "", "simulation: a file that keeps a long run's progress, so that it goes on where it stopped in the next sitting "+
	"(the same test binary only); -sim.seeds then counts the whole run's seeds")

// simRun is a run of consecutive seeds that may take several sittings: a
// run of a million seeds outlasts most machines' sessions. A checkpoint
// holds the seeds that passed, from First up to Next, and their figures; a
// sitting goes on from Next. Seeds that were running when a sitting ended
// run again in the next one.
//
// Only the test binary that wrote a checkpoint may go on with it: another
// build may schedule the same seed differently, or check other code, and
// its seeds are not the same run's.
type simRun struct {
	Binary   string        `json:"binary"` // sha256 of the test binary
	First    uint64        `json:"first"`
	Next     uint64        `json:"next"`
	Sittings int           `json:"sittings"`
	Running  time.Duration `json:"running"` // wall-clock time of the sittings
	Totals   simResult     `json:"totals"`
}

// seeds is how many seeds of the run passed.
func (r *simRun) seeds() int { return int(r.Next - r.First) }

// loadSimRun reads the checkpoint at path for this binary, or starts a run
// from first if there is none. A checkpoint of another binary or of
// another first seed is refused: mixing them would count seeds that did
// not run as this one runs them.
func loadSimRun(path string, first uint64) (simRun, error) {
	binary, err := testBinaryDigest()
	if err != nil {
		return simRun{}, err
	}
	run := simRun{Binary: binary, First: first, Next: first}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return run, nil
	}
	if err != nil {
		return simRun{}, fmt.Errorf("reading the simulation's checkpoint: %w", err)
	}
	var saved simRun
	if err := json.Unmarshal(data, &saved); err != nil {
		return simRun{}, fmt.Errorf("reading the simulation's checkpoint %s: %w", path, err)
	}
	if saved.Binary != binary {
		return simRun{}, fmt.Errorf("the simulation's checkpoint %s was written by another build of the tests (binary %.12s, this one %.12s): its seeds may run differently here; remove it to start the run again", path, saved.Binary, binary)
	}
	if saved.First != first {
		return simRun{}, fmt.Errorf("the simulation's checkpoint %s is of a run from seed %d, not %d: remove it, or go on from %d", path, saved.First, first, saved.First)
	}
	return saved, nil
}

// after is the run with a sitting's passed seeds and figures added.
func (r simRun) after(sitting simResult, next uint64, running time.Duration) simRun {
	var totals simResult
	totals.add(r.Totals)
	totals.add(sitting)
	r.Totals, r.Next, r.Running = totals, next, r.Running+running
	return r
}

// save writes the checkpoint whole or not at all.
func (r simRun) save(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("writing the simulation's checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing the simulation's checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing the simulation's checkpoint %s: %w", path, err)
	}
	return nil
}

// summary says what the run did over all its sittings.
func (r *simRun) summary() string {
	return fmt.Sprintf("simulation run: seeds %d to %d in %d sitting(s), %s of running (%.0f elections/s), %s", r.First, r.Next-1, r.Sittings,
		r.Running.Round(time.Second), float64(r.Totals.elections)/max(r.Running.Seconds(), 1e-9), r.Totals.summary())
}

// testBinaryDigest is the sha256 of the running test binary.
func testBinaryDigest() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the test binary: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("reading the test binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading the test binary: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// figures names each of simResult's figures once, for its JSON.
func (r *simResult) figures() map[string]any {
	return map[string]any{
		"elections": &r.elections, "terms": &r.terms, "handovers": &r.handovers, "controllerWrites": &r.controllerWrites, "pings": &r.pings,
		"witnessWrites": &r.witnessWrites, "fenced": &r.fenced, "guardedWrites": &r.guardedWrites, "collected": &r.collected, "identityInUse": &r.identityInUse,
		"holderExits": &r.holderExits, "fleets": &r.fleets, "firstHolders": &r.firstHolders, "maxQueued": &r.maxQueued,
		"simulated": &r.simulated, "toLeader": &r.toLeader, "toBest": &r.toBest, "faults": &r.faults, "adopters": &r.adopters,
		"spacedRuns": &r.spacedRuns, "rounds": &r.rounds, "toFailover": &r.toFailover, "swarms": &r.swarms, "recreated": &r.recreated, "boundRaises": &r.boundRaises,
		"nudges": &r.nudges, "nudged": &r.nudged, "haRuns": &r.haRuns,
	}
}

// MarshalJSON writes the figures of runs that passed (a checkpoint holds
// no violation or trace).
func (r simResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(r.figures())
}

func (r *simResult) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	for name, field := range r.figures() {
		if v, ok := raw[name]; ok {
			if err := json.Unmarshal(v, field); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// TestSimulationCheckpoint: a run in two sittings, through its checkpoint
// file, adds up to the same figures as the run in one; a checkpoint of
// another build or another first seed is refused.
func TestSimulationCheckpoint(t *testing.T) {
	const first, seeds = 101, 4
	var whole simResult
	if ran, failed := runSeeds(first, seeds, 0, 2, &whole, nil); ran != seeds || failed != 0 {
		t.Fatalf("one sitting: %d seeds ran, seed %d failed", ran, failed)
	}
	path := filepath.Join(t.TempDir(), "run.json")
	for sitting := range 2 {
		run, err := loadSimRun(path, first)
		if err != nil {
			t.Fatal(err)
		}
		if want := first + uint64(sitting*seeds/2); run.Next != want {
			t.Fatalf("sitting %d goes on from seed %d, want %d", sitting+1, run.Next, want)
		}
		var part simResult
		ran, failed := runSeeds(run.Next, seeds/2, 0, 2, &part, nil)
		if ran != seeds/2 || failed != 0 {
			t.Fatalf("sitting %d: %d seeds ran, seed %d failed", sitting+1, ran, failed)
		}
		run = run.after(part, run.Next+uint64(ran), time.Second)
		run.Sittings++
		if err := run.save(path); err != nil {
			t.Fatal(err)
		}
	}
	run, err := loadSimRun(path, first)
	if err != nil {
		t.Fatal(err)
	}
	if run.seeds() != seeds || run.Sittings != 2 || run.Running != 2*time.Second {
		t.Errorf("after two sittings: %d seeds, %d sittings, %s running; want %d, 2, 2s", run.seeds(), run.Sittings, run.Running, seeds)
	}
	if whole.elections == 0 {
		t.Fatal("the seeds held no election")
	}
	if got, want := run.Totals.summary(), whole.summary(); got != want {
		t.Errorf("two sittings:\n%s\none sitting:\n%s", got, want)
	}

	if _, err := loadSimRun(path, first+1); err == nil {
		t.Error("a checkpoint of a run from another seed was taken")
	}
	run.Binary = "0123456789abcdef"
	if err := run.save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := loadSimRun(path, first); err == nil {
		t.Error("a checkpoint of another test binary was taken")
	}
}
