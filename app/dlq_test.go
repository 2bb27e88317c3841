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
	ch := pipelinetest.Channel(t, amqpURL)
	if err := ch.PublishWithContext(ctx, "", pipeline.QueueDLQ, false, false, amqp.Publishing{MessageId: "junk-1",
		Body: []byte("{"), Headers: amqp.Table{pipeline.HeaderReason: "decode", pipeline.HeaderAttempts: int32(1)}}); err != nil {
		t.Fatal(err)
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
