package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

func TestDLQCommand(t *testing.T) {
	ctx := context.Background()
	args := serviceArgs(t)
	for _, bad := range [][]string{{"dlq"}, {"dlq", "peek"}, {"dlq", "replay"}, {"dlq", "replay", "--all", "--event-id", "x"}} {
		if err := run(ctx, bad, &bytes.Buffer{}); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v", bad, err)
		}
	}
	// A poison body in the dead-letter queue (the list declares the topology).
	var out bytes.Buffer
	if err := run(ctx, append([]string{"dlq", "list"}, args...), &out); err != nil || !strings.Contains(out.String(), "0 messages") {
		t.Fatalf("empty list: %v %q", err, out.String())
	}
	var amqpURL string
	for i, a := range args {
		if a == "--amqp-url" {
			amqpURL = args[i+1]
		}
	}
	// Published with a confirm: the list below must find it in the queue
	// (a quorum queue counts a message once its leader has it committed;
	// an unconfirmed publish may not be there yet on a loaded machine).
	ch := pipelinetest.Channel(t, amqpURL)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", pipeline.QueueDLQ, true, false, amqp.Publishing{MessageId: "junk-1",
		Body: []byte("{"), Headers: amqp.Table{pipeline.HeaderReason: "decode", pipeline.HeaderAttempts: int32(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish to %s not confirmed: %v", pipeline.QueueDLQ, err)
	}
	out.Reset()
	if err := run(ctx, append([]string{"dlq", "list"}, args...), &out); err != nil ||
		!strings.Contains(out.String(), "1 messages") || !strings.Contains(out.String(), "junk-1") || !strings.Contains(out.String(), "not replayable") {
		t.Fatalf("list: %v %q", err, out.String())
	}
	out.Reset()
	if err := run(ctx, append([]string{"dlq", "replay", "--event-id", "junk-1"}, args...), &out); err != nil || !strings.Contains(out.String(), `"kept": [`) {
		t.Fatalf("replay: %v %q", err, out.String())
	}
	out.Reset()
	if err := run(ctx, append([]string{"dlq", "replay", "--all", "--drop-poison"}, args...), &out); err != nil || !strings.Contains(out.String(), `"junk-1"`) {
		t.Fatalf("drop: %v %q", err, out.String())
	}
	out.Reset()
	if err := run(ctx, append([]string{"dlq", "list"}, args...), &out); err != nil || !strings.Contains(out.String(), "0 messages") {
		t.Fatalf("after drop: %v %q", err, out.String())
	}
}
