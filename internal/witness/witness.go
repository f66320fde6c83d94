// Package witness is the writing side of cle's fault-injection witness
// (test/chaos): an HTTP service that stands for a resource guarded by a
// Lease, or by the shards of a group. A leader (or a shard's owner) POSTs a Write (identity, fencing token, sequence number,
// its own clock's time) through a write-guarded HTTP client, stamped with the
// moment the write got past the guard; the witness answers 409 Conflict to a
// token older than one it has accepted. The example programs (the library
// candidate, the client-go elector on pkg/lock, the controller-runtime
// manager) share it.
package witness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Write is the body of a write to the witness.
type Write struct {
	Identity string `json:"identity"`
	// Shard is the shard of a group the write is made for, with that
	// shard's grant's token; nil for the leader of a Lease.
	Shard *int  `json:"shard,omitempty"`
	Token int64 `json:"token"`
	Seq   int   `json:"seq"`
	// Time is when the write was sent, on the writer's (offset) clock.
	Time time.Time `json:"time"`
}

// GuardPassedHeader carries the moment a write got past the write guard, on
// the writer's (offset) clock: the last moment its writer decided, as
// leader, to make it. A write that was held after that (the process was
// frozen, or starved of CPU) can reach the witness after a successor's; the
// witness tells such a late delivery, which the fencing token is there to
// refuse, from two leaders acting at once.
const GuardPassedHeader = "Cle-Guard-Passed"

// ErrFenced is the error of a write the witness refused because a newer
// term has written.
var ErrFenced = errors.New("a newer term has written")

// Client returns the HTTP client of a leader's writes to url: guard wraps
// its transport (a candidate's WrapConfig), and under the guard each write
// is stamped with clk's time.
func Client(url string, clk clock.PassiveClock, guard func(*rest.Config) *rest.Config) (*http.Client, error) {
	cfg := &rest.Config{Host: url, Timeout: 2 * time.Second}
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set(GuardPassedHeader, clk.Now().Format(time.RFC3339Nano))
			return next.RoundTrip(req)
		})
	})
	return rest.HTTPClientFor(guard(cfg))
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Report writes w (its writer's Identity, Token and Shard) to url every
// interval until ctx, the term's or the shard's context, is done, and tells
// done of each write's outcome.
func Report(ctx context.Context, client *http.Client, url string, w Write, interval time.Duration, clk clock.PassiveClock, done func(seq int, err error)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for seq := 1; ; seq++ {
		w.Seq, w.Time = seq, clk.Now()
		done(seq, Post(ctx, client, url, w))
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Post sends one write; a refusal for its token wraps ErrFenced.
func Post(ctx context.Context, client *http.Client, url string, w Write) error {
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrFenced, bytes.TrimSpace(msg))
	default:
		return fmt.Errorf("witness answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
}

// OffsetClock is the real clock shifted by Offset: the clock of a machine
// whose time is wrong. Durations and timers are unaffected, as they are on
// such a machine.
type OffsetClock struct {
	clock.RealClock
	Offset time.Duration
}

func (c OffsetClock) Now() time.Time { return c.RealClock.Now().Add(c.Offset) }

func (c OffsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
