package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// eventIDs is a repeatable --event-id flag (also comma-separated).
type eventIDs []string

func (e *eventIDs) String() string { return strings.Join(*e, ",") }
func (e *eventIDs) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*e = append(*e, s)
		}
	}
	return nil
}

// runDLQ is `stampede dlq list [--limit N]` and
// `stampede dlq replay --all | --event-id X [--event-id Y] [--drop-poison]`.
func runDLQ(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		return fmt.Errorf("%w: stampede dlq list|replay [flags]", errUsage)
	}
	sub := args[0]
	var (
		limit      int
		all, drop  bool
		ids        eventIDs
		asJSONFlag bool
	)
	cfg, err := parse("dlq "+sub, args[1:], func(fs *flag.FlagSet) {
		if sub == "list" {
			fs.IntVar(&limit, "limit", 100, "most dead-letter messages and DEAD outbox rows shown")
			fs.BoolVar(&asJSONFlag, "json", false, "print JSON")
			return
		}
		fs.BoolVar(&all, "all", false, "replay every dead-letter message and DEAD outbox row")
		fs.Var(&ids, "event-id", "event id to replay (repeatable, or comma-separated)")
		fs.BoolVar(&drop, "drop-poison", false, "remove selected dead-letter messages that have no outbox row (poison bodies)")
	})
	if err != nil {
		return err
	}
	if sub == "replay" && all == (len(ids) > 0) {
		return fmt.Errorf("%w: give either --all or --event-id", errUsage)
	}
	store, err := persistence.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return err
	}
	defer store.Close()
	conn, err := pipeline.NewConn(pipeline.ConnConfig{URL: cfg.AMQPURL, Name: "stampede-dlq-cli", Topology: cfg.topology()})
	if err != nil {
		return err
	}
	defer conn.Close()
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if sub == "replay" {
		res, err := pipeline.ReplayDLQ(ctx, conn, store, pipeline.ReplayRequest{EventIDs: ids, All: all, DropPoison: drop})
		if err != nil {
			return err
		}
		return enc.Encode(res)
	}
	rep, err := pipeline.InspectDLQ(ctx, conn, store, limit)
	if err != nil {
		return err
	}
	if asJSONFlag {
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "dead-letter queue %s: %d messages\n", pipeline.QueueDLQ, rep.Depth)
	for _, m := range rep.Messages {
		outbox := m.OutboxStatus
		if outbox == "" {
			outbox = "none (poison: not replayable)"
		}
		fmt.Fprintf(stdout, "  %s type=%s queue=%s handler=%s attempts=%d outbox=%s reason=%q\n",
			m.EventID, m.Type, m.Queue, m.Handler, m.Attempts, outbox, m.Reason)
	}
	fmt.Fprintf(stdout, "DEAD outbox rows: %d shown\n", len(rep.DeadOutbox))
	for _, r := range rep.DeadOutbox {
		fmt.Fprintf(stdout, "  %s type=%s order=%s retries=%d error=%q\n", r.EventID, r.EventType, r.OrderNo, r.RetryCount, r.LastError)
	}
	return nil
}
