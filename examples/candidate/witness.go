package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// witnessWrite is the body of a write to the witness.
type witnessWrite struct {
	Identity string `json:"identity"`
	Token    int32  `json:"token"`
	Seq      int    `json:"seq"`
	// Time is when the write was sent, on this process's (offset) clock.
	Time time.Time `json:"time"`
}

// guardPassedHeader carries the moment a write to the witness got past the
// write guard, on this process's (offset) clock: the last moment this
// process decided, as leader, to make it. A write that was held after that
// (the process was frozen, or starved of CPU) can reach the witness after a
// successor's; the witness tells such a late delivery, which the fencing
// token is there to refuse, from two leaders acting at once.
const guardPassedHeader = "Cle-Guard-Passed"

// stampGuardPassed wraps the transport under the write guard: it runs only
// for a write the guard let through, and stamps it with clk's time.
func stampGuardPassed(clk clock.PassiveClock) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set(guardPassedHeader, clk.Now().Format(time.RFC3339Nano))
			return next.RoundTrip(req)
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// reportToWitness writes to the witness every --witness-interval until ctx,
// the term's context, is done.
func reportToWitness(ctx context.Context, client *http.Client, token int32, o options, out *printer) {
	ticker := time.NewTicker(o.witnessInterval)
	defer ticker.Stop()
	clk := offsetClock{offset: o.clockOffset}
	for seq := 1; ; seq++ {
		err := postWitness(ctx, client, o.witnessURL, witnessWrite{Identity: o.identity, Token: token, Seq: seq, Time: clk.Now()})
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Witness write failed", "err", err)
		}
		result := writeResult(err)
		out.print("witness token=%d seq=%d result=%s", token, seq, result)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func postWitness(ctx context.Context, client *http.Client, url string, w witnessWrite) error {
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
		return fmt.Errorf("%w: %s", errFenced, bytes.TrimSpace(msg))
	default:
		return fmt.Errorf("witness answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
}

// offsetClock is the real clock shifted by offset: the clock of a machine
// whose time is wrong. Durations and timers are unaffected, as they are on
// such a machine.
type offsetClock struct {
	clock.RealClock
	offset time.Duration
}

func (c offsetClock) Now() time.Time { return c.RealClock.Now().Add(c.offset) }

func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
