package main

import (
	"context"
	"fmt"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/witness"
	"github.com/cle-dev/cle/pkg/candidate"
)

// runGroup runs this process as a replica of the shard group cfg.LeaseName,
// built for o.shards shards. Each shard it is granted prints started-shard
// and, once its work returned, stopped-shard; with --witness-url the shard's
// work reports to the witness with the shard and its grant's token, through
// a client the group guards per shard.
func runGroup(ctx context.Context, o options, cfg candidate.Config, out *printer) error {
	var client *http.Client // set before Run, used only by shard work
	clk := witness.OffsetClock{Offset: o.clockOffset}
	g, err := candidate.NewGroup(candidate.GroupConfig{
		Config: cfg,
		Shards: o.shards,
		OnShardStarted: func(ctx context.Context, s candidate.Shard) {
			logger := klog.FromContext(ctx).WithValues("shard", s.Index, "token", s.Token)
			out.print("started-shard shard=%d token=%d", s.Index, s.Token)
			logger.Info("Acting on a shard", "count", s.Count)
			defer func() {
				out.print("stopped-shard shard=%d token=%d", s.Index, s.Token)
				logger.Info("Stopped acting on a shard")
			}()
			if client == nil {
				<-ctx.Done()
				return
			}
			witness.Report(ctx, client, o.witnessURL, witness.Write{Identity: o.identity, Shard: &s.Index, Token: s.Token}, o.witnessInterval, clk,
				func(seq int, err error) {
					if err != nil {
						logger.V(2).Info("Witness write failed", "seq", seq, "err", err)
					}
				})
		},
	})
	if err != nil {
		return err
	}
	if o.witnessURL != "" {
		if client, err = witness.Client(o.witnessURL, clk, g.WrapConfig); err != nil {
			return fmt.Errorf("witness client: %w", err)
		}
	}
	return g.Run(ctx)
}
