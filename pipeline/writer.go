package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// WriterConfig configures a Writer. Zero fields take the documented default.
type WriterConfig struct {
	// Group is the consumer group every writer of the deployment shares.
	// Default "writers".
	Group string
	// Consumer is this writer's name in the group; it must be unique among
	// live writers. Give a stable name (e.g. the pod name) to have a
	// restarted writer pick up its own pending entries at once; with the
	// default, "<hostname>-<pid>-<random>", another writer reclaims them
	// after ClaimIdle.
	Consumer string
	// BatchSize is the most entries written in one MySQL transaction (N),
	// 1…MaxWriterBatch. Default 500.
	BatchSize int
	// BatchWait is how long the first entry of a batch waits for the batch
	// to fill before it is written anyway (T). Default 20ms.
	BatchWait time.Duration
	// ClaimIdle is how long an entry must have been pending (delivered, not
	// acknowledged) before this writer takes it over with XAUTOCLAIM: the
	// time after which a silent writer is presumed dead. Default 30s.
	ClaimIdle time.Duration
	// ClaimInterval is how often the writer runs XAUTOCLAIM over every
	// stream. Default ClaimIdle / 2.
	ClaimInterval time.Duration
	// StreamRefresh is how often the set lua.StreamsKey is re-read to find
	// new intake streams. Default 1s.
	StreamRefresh time.Duration
	// IdlePoll is the longest pause between two reads of a stream that had
	// nothing new. The pause starts at 5ms and doubles while the stream stays
	// empty, so a busy stream is read back to back and an idle one costs at
	// most one XREADGROUP per IdlePoll. Default 200ms.
	IdlePoll time.Duration
	// RetryMin and RetryMax bound the backoff between attempts to write a
	// batch that failed (MySQL down, deadlock) or to reach Redis. Defaults
	// 100ms and 5s.
	RetryMin time.Duration
	RetryMax time.Duration
	// FlushTimeout bounds the final write of the in-flight batch after the
	// Run context is cancelled. Default 5s.
	FlushTimeout time.Duration
	// DeadMaxLen caps each dead stream (see Writer) at about this many
	// entries (XADD MAXLEN ~). Default 100000.
	DeadMaxLen int64
	// PruneIdle: with each claim round the writer deletes from the group
	// the consumers (other writers, dead or restarted under a new name)
	// that hold no pending entry and were idle this long, so scaling and
	// restarts do not pile up names in every stream's group; a live writer
	// that was pruned is re-created by its next read. A stopping writer
	// deletes its own name if it holds no pending entry. Default 10 ×
	// ClaimIdle; negative: never prune.
	PruneIdle time.Duration
	// RequestTTL is the lifetime of the idempotency records the gateways
	// write (their Config.RequestTTL; both default to
	// order.DefaultRequestTTL): an entry whose (user, product, requestId)
	// already has an order accepted at least this long before is a new
	// intent and stored as a new order (persistence.InsertReservationsWithin).
	RequestTTL time.Duration
	// ReplicaAcks, above 0 (Redis durability replicated), makes the writer
	// wait until the entries of a batch are on that many Redis replicas
	// (lua.WaitReplicas, at most ReplicaWait) before it writes them to
	// MySQL; otherwise the batch is retried like a failed write. An order is
	// then never stored from an entry that a failover could still lose
	// (with its stock decrement and idempotency record). Default 0: no wait.
	ReplicaAcks int
	ReplicaWait time.Duration
	// Flushers is the number of batches written at once, each in its own
	// MySQL transaction (1…16). With LockOrders their transactions overlap
	// everywhere but from the stock UPDATE to the commit; batches may then
	// commit out of stream order (when MySQL stock is short, the orders that
	// do not fit are decided in stream order within a batch). Default 2 with
	// LockOrders, else 1 (today's designs unchanged).
	Flushers int
	// LockOrders selects the "writer" order-lock design
	// (STAMPEDE_CONSUMER_LOCK=writer, the default): each batch is stored
	// already locked in the writer's own transaction
	// (persistence.Store.InsertLockedReservations: WAITING_PAY with its pay
	// deadline, or FAILED where MySQL stock is short), so no ORDER_CREATED
	// message is written and the order-lock consumer has nothing to do.
	// False: orders are stored PROCESSING with an ORDER_CREATED outbox row
	// for the order-lock consumer (the batch design).
	LockOrders bool
	// PayTimeout is how long a locked order waits for payment (with
	// LockOrders): its pay_deadline is the database's clock after the stock
	// locks + PayTimeout (docs/spec.md §7, STAMPEDE_PAY_TIMEOUT). Default 15m.
	PayTimeout time.Duration
	// Logger receives warnings and errors. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the writer's series. Default: private, unregistered.
	Metrics *Metrics
}

// MaxWriterBatch is the largest WriterConfig.BatchSize (and the upper bound
// of STAMPEDE_WRITER_BATCH): the one place the limit is set. Statements are
// split below MySQL's placeholder limit whatever the size; the bound keeps
// one transaction's lock time and an XREADGROUP's reply reasonable.
const MaxWriterBatch = 5000

func (c *WriterConfig) setDefaults() {
	defer func() {
		c.PruneIdle = cmp.Or(c.PruneIdle, 10*c.ClaimIdle)
	}()
	c.Group = cmp.Or(c.Group, "writers")
	c.Consumer = cmp.Or(c.Consumer, instanceName())
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.BatchWait = cmp.Or(c.BatchWait, 20*time.Millisecond)
	c.ClaimIdle = cmp.Or(c.ClaimIdle, 30*time.Second)
	c.ClaimInterval = cmp.Or(c.ClaimInterval, c.ClaimIdle/2)
	c.StreamRefresh = cmp.Or(c.StreamRefresh, time.Second)
	c.IdlePoll = cmp.Or(c.IdlePoll, 200*time.Millisecond)
	c.RetryMin = cmp.Or(c.RetryMin, 100*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, 5*time.Second)
	c.FlushTimeout = cmp.Or(c.FlushTimeout, 5*time.Second)
	c.RequestTTL = cmp.Or(c.RequestTTL, order.DefaultRequestTTL)
	c.ReplicaWait = cmp.Or(c.ReplicaWait, 100*time.Millisecond)
	c.PayTimeout = cmp.Or(c.PayTimeout, 15*time.Minute)
	if c.LockOrders {
		c.Flushers = cmp.Or(c.Flushers, 2)
	}
	c.Flushers = cmp.Or(c.Flushers, 1)
	c.DeadMaxLen = cmp.Or(c.DeadMaxLen, 100000)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field.
func (c *WriterConfig) Validate() error {
	switch {
	case c.Group == "" || c.Consumer == "":
		return errors.New("invalid config: writer group and consumer must be set")
	case c.BatchSize < 1 || c.BatchSize > MaxWriterBatch:
		return fmt.Errorf("invalid config: writer batch size %d not in 1…%d", c.BatchSize, MaxWriterBatch)
	case c.BatchWait <= 0 || c.ClaimIdle <= 0 || c.ClaimInterval <= 0 || c.StreamRefresh <= 0 || c.IdlePoll <= 0 || c.FlushTimeout <= 0:
		return errors.New("invalid config: writer durations must be positive")
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("invalid config: writer retry backoff %v…%v", c.RetryMin, c.RetryMax)
	case c.Flushers < 0 || c.Flushers > 16:
		return fmt.Errorf("invalid config: writer flushers %d not in 1…16", c.Flushers)
	case c.LockOrders && c.PayTimeout <= 0:
		return fmt.Errorf("invalid config: writer pay timeout %v", c.PayTimeout)
	case c.DeadMaxLen < 1:
		return fmt.Errorf("invalid config: writer dead stream max length %d", c.DeadMaxLen)
	}
	return nil
}

// Writer turns intake stream entries into order rows (docs/spec.md §1 "writer").
//
// It finds the streams in the Redis set lua.StreamsKey (the gateway adds
// every shard's intake stream when a product is created) and joins each
// one's consumer group, created at id 0 so that entries added before the
// group existed are read too. Every stream is read on its own (one key per
// command, so it works unchanged on Redis Cluster): first this consumer's own
// pending entries (id 0, left by an earlier run under the same Consumer
// name), then new entries (id >). Reads are non-blocking XREADGROUPs sent as
// one pipeline per round over the streams that are due, with a per-stream
// idle backoff (see WriterConfig.IdlePoll); a blocking read per stream would
// hold one pooled connection per stream for as long as it blocks.
//
// Entries are batched, N or T whichever first (river's jobcompleter), and
// written with persistence.Store.InsertReservations, which is idempotent per
// orderNo: a redelivered or reclaimed entry changes nothing. Only after the
// commit are the entries acknowledged and deleted (XACK then XDEL of exactly
// those ids, in one MULTI per stream), which keeps streams short and never
// drops an unacknowledged entry. A batch that fails is retried with backoff
// and never acknowledged, so MySQL being down loses nothing; entries left
// pending by a writer that stopped are reclaimed by the others with
// XAUTOCLAIM after ClaimIdle.
//
// An entry that lua.ParseReservation rejects can never become an order; it
// is copied to the dead stream "<stream>:dead" (same hash tag, fields "id",
// "error" and the original fields), then acknowledged and deleted. Its stock
// stays reserved in Redis: the reconciler reports the drift and the dead
// stream keeps what an operator needs to repair it.
type Writer struct {
	cfg   WriterConfig
	store *persistence.Store
	rdb   redis.UniversalClient
	log   *slog.Logger
	m     *Metrics

	namesMu sync.Mutex       // guards names: every flusher reads and fills it
	names   map[int64]string // product names of the item snapshot, by product id

	mysql *breaker // around a batch's MySQL transaction

	// TestSignals are set by tests only, before Run (testsignals.go).
	TestSignals WriterTestSignals
}

// NewWriter returns a Writer; cfg is completed with defaults and validated.
func NewWriter(store *persistence.Store, rdb redis.UniversalClient, cfg WriterConfig) (*Writer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "writer", "consumer", cfg.Consumer)
	return &Writer{cfg: cfg, store: store, rdb: rdb, log: log, mysql: newBreaker("writer-mysql", log),
		m: orNew(cfg.Metrics), names: map[int64]string{}}, nil
}

// entry is one stream entry on its way to MySQL.
type entry struct {
	stream string
	msg    redis.XMessage
}

// Run reads and writes until ctx is cancelled, then writes the batch it
// holds — every entry Redis already delivered to it, including those read in
// the round that was running — with a fresh context bounded by FlushTimeout,
// acknowledges them and returns. Entries it could not write stay pending and
// are reclaimed later. It returns nil after a cancelled ctx.
func (w *Writer) Run(ctx context.Context) error {
	in := make(chan entry, w.cfg.BatchSize)
	var wg sync.WaitGroup
	var joined []string
	wg.Go(func() {
		defer close(in)
		joined = w.read(ctx, in)
	})
	w.flushLoop(ctx, in)
	wg.Wait()
	// Every entry this writer read is written and acknowledged (or left
	// pending for another writer's XAUTOCLAIM): leave the groups where it
	// holds nothing.
	if w.cfg.PruneIdle >= 0 {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		for _, stream := range joined {
			if _, err := lua.PruneConsumers(pctx, w.rdb, stream, w.cfg.Group, 0, "", w.cfg.Consumer); err != nil {
				w.log.Debug("writer: leaving the group", "stream", stream, "err", err)
			}
		}
		cancel()
	}
	return nil
}

// ---- reading ----

type streamState struct {
	name     string
	ready    bool          // group exists and own pending entries were read
	next     time.Time     // earliest next read (or join attempt while not ready)
	idle     time.Duration // current idle backoff
	failures int           // consecutive Redis errors on this stream alone
}

const minIdlePoll = 5 * time.Millisecond

// read returns the streams it joined.
func (w *Writer) read(ctx context.Context, in chan<- entry) (joined []string) {
	streams := map[string]*streamState{}
	defer func() {
		for name, s := range streams {
			if s.ready {
				joined = append(joined, name)
			}
		}
	}()
	var lastRefresh, lastClaim time.Time
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	failing := 0
	for ctx.Err() == nil {
		now := time.Now()
		var err error
		if now.Sub(lastRefresh) >= w.cfg.StreamRefresh {
			if err = w.refresh(ctx, streams, in); err == nil {
				lastRefresh = now
			}
		}
		if err == nil && now.Sub(lastClaim) >= w.cfg.ClaimInterval {
			if err = w.claim(ctx, streams, in); err == nil {
				lastClaim = now
			}
		}
		if err == nil {
			err = w.poll(ctx, streams, in)
		}
		if err != nil {
			if ctx.Err() != nil {
				return joined
			}
			failing++
			if failing == 1 || failing%50 == 0 {
				w.log.Warn("writer: redis read failed, retrying", "failures", failing, "err", err)
			}
			sleep(ctx, bo.next())
			continue
		}
		if failing > 0 {
			w.log.Info("writer: redis reads recovered", "failures", failing)
			failing = 0
			bo.reset()
		}
		// Sleep until the next stream is due, or the next refresh or claim.
		wake := lastRefresh.Add(w.cfg.StreamRefresh)
		if c := lastClaim.Add(w.cfg.ClaimInterval); c.Before(wake) {
			wake = c
		}
		for _, s := range streams {
			if s.ready && s.next.Before(wake) {
				wake = s.next
			}
		}
		sleep(ctx, time.Until(wake))
	}
	return joined
}

// refresh adds the streams named in lua.StreamsKey, creating the consumer
// group at id 0 and reading this consumer's own pending entries first.
func (w *Writer) refresh(ctx context.Context, streams map[string]*streamState, in chan<- entry) error {
	names, err := w.rdb.SMembers(ctx, lua.StreamsKey).Result()
	if err != nil {
		return fmt.Errorf("writer: list streams: %w", err)
	}
	for _, name := range names {
		s := streams[name]
		if s == nil {
			s = &streamState{name: name}
			streams[name] = s
		}
		if s.ready || time.Now().Before(s.next) {
			continue
		}
		if err := w.join(ctx, s, in); err != nil {
			if !isServerError(err) {
				return err // connection trouble: the reader backs off as a whole
			}
			w.streamFailed(s, "join", err)
		}
	}
	return nil
}

// streamFailed parks a stream that Redis refuses (e.g. a key of the wrong
// type in lua.StreamsKey) for RetryMax, so it cannot stall the others.
func (w *Writer) streamFailed(s *streamState, op string, err error) {
	s.failures++
	s.next = time.Now().Add(w.cfg.RetryMax)
	if s.failures == 1 || s.failures%100 == 0 {
		w.log.Error("writer: stream refused by redis, skipping it for now", "stream", s.name, "op", op, "failures", s.failures, "err", err)
	}
}

// isServerError reports whether err is an error reply from Redis (as opposed
// to a network or context error).
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// join creates the group (if missing) and drains this consumer's pending
// entries of s into in.
func (w *Writer) join(ctx context.Context, s *streamState, in chan<- entry) error {
	// Id "0", not "$": entries added before the group existed must be read.
	err := w.rdb.XGroupCreateMkStream(ctx, s.name, w.cfg.Group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("writer: create group on %s: %w", s.name, err)
	}
	start := "0"
	for {
		res, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: w.cfg.Group, Consumer: w.cfg.Consumer,
			Streams: []string{s.name, start}, Count: int64(w.cfg.BatchSize), Block: -1}).Result()
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			return fmt.Errorf("writer: read own pending of %s: %w", s.name, err)
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			break
		}
		for _, m := range res[0].Messages {
			in <- entry{stream: s.name, msg: m}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		start = res[0].Messages[len(res[0].Messages)-1].ID
	}
	s.ready, s.next, s.failures = true, time.Time{}, 0
	return nil
}

// poll reads new entries of every stream that is due, in one pipeline of
// single-stream XREADGROUPs.
func (w *Writer) poll(ctx context.Context, streams map[string]*streamState, in chan<- entry) error {
	now := time.Now()
	var due []*streamState
	for _, s := range streams {
		if s.ready && !s.next.After(now) {
			due = append(due, s)
		}
	}
	if len(due) == 0 {
		return nil
	}
	cmds := make([]*redis.XStreamSliceCmd, len(due))
	// Not cancelled by shutdown: Redis makes entries pending the moment it
	// answers XREADGROUP, so a read abandoned mid-flight would leave them
	// delivered to this writer and never written (pending until another
	// writer's claim). The reads do not block; FlushTimeout bounds them.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.FlushTimeout)
	defer cancel()
	_, err := w.rdb.Pipelined(rctx, func(p redis.Pipeliner) error {
		for i, s := range due {
			cmds[i] = p.XReadGroup(rctx, &redis.XReadGroupArgs{Group: w.cfg.Group, Consumer: w.cfg.Consumer,
				Streams: []string{s.name, ">"}, Count: int64(w.cfg.BatchSize), Block: -1})
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !isServerError(err) {
		return fmt.Errorf("writer: read streams: %w", err)
	}
	for i, s := range due {
		res, err := cmds[i].Result()
		switch {
		case errors.Is(err, redis.Nil) || (err == nil && (len(res) == 0 || len(res[0].Messages) == 0)):
			s.idle = min(max(s.idle*2, minIdlePoll), w.cfg.IdlePoll)
			s.next = now.Add(s.idle)
		case isNoGroup(err):
			// The stream or its group was deleted: join again on the next refresh.
			s.ready, s.next = false, time.Time{}
		case isServerError(err):
			w.streamFailed(s, "read", err)
		case err != nil:
			return fmt.Errorf("writer: read %s: %w", s.name, err)
		default:
			s.idle, s.next, s.failures = 0, time.Time{}, 0
			for _, m := range res[0].Messages {
				in <- entry{stream: s.name, msg: m}
			}
		}
	}
	return nil
}

// claim takes over entries pending longer than ClaimIdle, on every stream.
func (w *Writer) claim(ctx context.Context, streams map[string]*streamState, in chan<- entry) error {
	for _, s := range streams {
		if !s.ready {
			continue
		}
		start := "0-0"
		for page := 0; page < 20; page++ { // bounded work per round; the rest next round
			// Not cancelled by shutdown, like poll's reads: a claim Redis
			// answered moves the entries to this writer.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.FlushTimeout)
			msgs, next, err := w.rdb.XAutoClaim(cctx, &redis.XAutoClaimArgs{Stream: s.name, Group: w.cfg.Group,
				Consumer: w.cfg.Consumer, MinIdle: w.cfg.ClaimIdle, Start: start, Count: int64(w.cfg.BatchSize)}).Result()
			cancel()
			if isNoGroup(err) {
				s.ready, s.next = false, time.Time{}
				break
			}
			if isServerError(err) {
				w.streamFailed(s, "autoclaim", err)
				break
			}
			if err != nil {
				return fmt.Errorf("writer: autoclaim %s: %w", s.name, err)
			}
			if len(msgs) > 0 {
				w.m.writerClaimed.Add(float64(len(msgs)))
				w.log.Warn("writer: reclaimed pending entries", "stream", s.name, "entries", len(msgs))
			}
			for _, m := range msgs {
				in <- entry{stream: s.name, msg: m}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if next == "0-0" || next == "" {
				break
			}
			start = next
		}
		if s.ready && w.cfg.PruneIdle >= 0 {
			n, err := lua.PruneConsumers(ctx, w.rdb, s.name, w.cfg.Group, w.cfg.PruneIdle, w.cfg.Consumer, "")
			if err != nil && !isServerError(err) {
				return fmt.Errorf("writer: prune consumers of %s: %w", s.name, err)
			}
			if n > 0 {
				w.log.Info("writer: removed idle consumers without pending entries from the group", "stream", s.name, "consumers", n)
			}
		}
	}
	return nil
}

func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// Entries Redis has delivered are always handed to the flusher, also after
// ctx was cancelled (a plain send on in, not a select on ctx): the flusher
// receives until the reader closes in, and a delivered entry that was
// dropped would stay pending under this consumer's name until another
// writer's XAUTOCLAIM, ClaimIdle later — a restart would then wait for it.

// ---- writing ----

// flushLoop collects entries into batches (N or T, whichever first) and
// hands each to one of Flushers goroutines that write it. A batch a flusher
// could not write before ctx was cancelled is written by finalFlush.
func (w *Writer) flushLoop(ctx context.Context, in <-chan entry) {
	batches := make(chan []entry)
	var wg sync.WaitGroup
	for range max(w.cfg.Flushers, 1) {
		wg.Go(func() {
			for b := range batches {
				if !w.flush(ctx, b) {
					w.finalFlush(b)
				}
			}
		})
	}
	defer wg.Wait()
	defer close(batches)
	batch := make([]entry, 0, w.cfg.BatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case e, ok := <-in:
			if !ok { // the reader stopped: ctx is cancelled
				w.finalFlush(batch)
				return
			}
			if len(batch) == 0 {
				timer.Reset(w.cfg.BatchWait)
			}
			batch = append(batch, e)
			if len(batch) >= w.cfg.BatchSize {
				batches <- batch
				batch = make([]entry, 0, w.cfg.BatchSize)
				timer.Stop()
			}
		case <-timer.C:
			if len(batch) > 0 {
				batches <- batch
				batch = make([]entry, 0, w.cfg.BatchSize)
			}
		}
	}
}

// finalFlush writes what is left after ctx was cancelled, with a fresh
// context bounded by FlushTimeout, retrying transient failures (a deadlock
// with another writer, a lock wait timeout) with backoff within that bound.
// What it cannot write stays pending for another writer.
func (w *Writer) finalFlush(batch []entry) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.FlushTimeout)
	defer cancel()
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for attempt := 1; ; attempt++ {
		err := w.write(ctx, batch)
		if err == nil {
			return
		}
		if !persistence.IsRetryable(err) || ctx.Err() != nil {
			w.log.Warn("writer: final flush failed; entries stay pending for another writer", "entries", len(batch), "attempts", attempt, "err", err)
			return
		}
		sleep(ctx, bo.next())
	}
}

// flush writes batch, retrying with backoff until it succeeds (true) or ctx
// is cancelled (false: the batch is still unwritten). A batch that MySQL
// rejects with a permanent error (not persistence.IsRetryable) is split in
// halves that are flushed on their own, recursively; a single entry that
// still fails is moved to its stream's dead stream with the error.
func (w *Writer) flush(ctx context.Context, batch []entry) bool {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := w.write(ctx, batch)
		if err == nil {
			if attempt > 1 {
				w.log.Info("writer: batch written after retries", "attempts", attempt, "entries", len(batch))
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !persistence.IsRetryable(err) {
			// MySQL rejected the batch for good (a value it cannot store,
			// a constraint): split it to isolate the entries at fault, down
			// to single entries, which go to the dead stream.
			if len(batch) > 1 {
				w.log.Warn("writer: batch rejected, splitting", "entries", len(batch), "err", err)
				h := len(batch) / 2
				ok := w.flush(ctx, batch[:h])
				return w.flush(ctx, batch[h:]) && ok
			}
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.FlushTimeout)
			berr := w.bury(actx, batch, []error{err})
			cancel()
			if berr == nil {
				return true
			}
			err = berr
		}
		w.m.writerFailures.Inc()
		if attempt == 1 || attempt%20 == 0 {
			w.log.Warn("writer: flush batch failed, retrying", "attempt", attempt, "entries", len(batch), "err", err)
		}
		sleep(ctx, bo.next())
	}
	return false
}

// waitReplicas is the replica barrier of WriterConfig.ReplicaAcks over the
// streams of es: one SET + WAIT per Redis primary, then a check that each
// entry is still in its stream on the primary that answered the WAIT. It
// returns the entries that are (a failover between the read and the barrier
// may have lost some: they never became orders and are not written now).
func (w *Writer) waitReplicas(ctx context.Context, es []entry) ([]entry, error) {
	var streams []string
	seen := map[string]bool{}
	for _, e := range es {
		if !seen[e.stream] {
			seen[e.stream] = true
			streams = append(streams, e.stream)
		}
	}
	if err := lua.WaitReplicas(ctx, w.rdb, streams, w.cfg.ReplicaAcks, w.cfg.ReplicaWait); err != nil {
		return nil, fmt.Errorf("writer: entries not yet on %d Redis replicas: %w", w.cfg.ReplicaAcks, err)
	}
	cmds := make([]*redis.XMessageSliceCmd, len(es))
	if _, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range es {
			cmds[i] = p.XRange(ctx, e.stream, e.msg.ID, e.msg.ID)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("writer: check entries after the replica wait: %w", err)
	}
	kept := es[:0:0]
	for i, e := range es {
		if len(cmds[i].Val()) == 1 {
			kept = append(kept, e)
		} else {
			w.log.Warn("writer: intake entry gone from Redis after the replica wait (lost with a failover); not written",
				"stream", e.stream, "id", e.msg.ID)
		}
	}
	return kept, nil
}

// write stores one batch and acknowledges it: parse, move unparseable
// entries to their dead stream, InsertReservations, then XACK+XDEL.
func (w *Writer) write(ctx context.Context, batch []entry) error {
	seen := make(map[string]bool, len(batch))
	res := make([]order.Reservation, 0, len(batch))
	done := make([]entry, 0, len(batch)) // to acknowledge after the commit
	var dead []entry
	var deadErr []error
	for _, e := range batch {
		key := e.stream + "\x00" + e.msg.ID
		if seen[key] { // the same entry read twice (e.g. read, then reclaimed)
			continue
		}
		seen[key] = true
		r, err := lua.ParseReservation(e.msg.Values)
		if err != nil {
			dead = append(dead, e)
			deadErr = append(deadErr, err)
			continue
		}
		res = append(res, r)
		done = append(done, e)
	}
	if len(res) > 0 && w.cfg.ReplicaAcks > 0 {
		kept, err := w.waitReplicas(ctx, done)
		if err != nil {
			return err
		}
		if len(kept) < len(done) {
			res = res[:0]
			for _, e := range kept {
				r, _ := lua.ParseReservation(e.msg.Values)
				res = append(res, r)
			}
			done = kept
		}
	}
	if len(res) > 0 {
		if err := w.storeBatch(ctx, res); err != nil {
			return err
		}
		if w.TestSignals.AfterCommit != nil {
			w.TestSignals.AfterCommit(len(res))
		}
	}
	// Acknowledge even if ctx was cancelled during the commit (shutdown):
	// the rows are stored, and an unacknowledged entry would wait ClaimIdle
	// for another writer. Bounded by FlushTimeout.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.FlushTimeout)
	defer cancel()
	// After the commit, so a retried batch does not bury its dead entries twice.
	if len(dead) > 0 {
		if err := w.bury(actx, dead, deadErr); err != nil {
			return err
		}
	}
	if err := w.ack(actx, done); err != nil {
		// Committed but not acknowledged: the entries are reclaimed after
		// ClaimIdle and their second write changes nothing.
		w.log.Warn("writer: ack after commit failed; entries will be reclaimed", "entries", len(done), "err", err)
	}
	return nil
}

// storeBatch writes the reservations of one batch in one MySQL transaction:
// PROCESSING with ORDER_CREATED (InsertReservationsWithin), or already
// locked with WriterConfig.LockOrders (InsertLockedReservations, whose
// new statuses are then recorded in Redis for replays, as the order-lock
// consumer does).
func (w *Writer) storeBatch(ctx context.Context, res []order.Reservation) error {
	start := time.Now()
	var out persistence.InsertResult
	var moved []persistence.Order
	err := guard(w.mysql, func() error {
		names, err := w.productNames(ctx, res)
		if err != nil {
			return err
		}
		if !w.cfg.LockOrders {
			out, err = w.store.InsertReservationsWithin(ctx, res, names, w.cfg.RequestTTL)
			return err
		}
		locked, err := w.store.InsertLockedReservations(ctx, res, names, w.cfg.RequestTTL, w.cfg.PayTimeout)
		out, moved = locked.InsertResult, locked.Orders
		return err
	})
	if err != nil {
		return fmt.Errorf("writer: flush batch: %w", err)
	}
	w.m.writerCommit.Observe(time.Since(start).Seconds())
	w.m.writerBatch.Observe(float64(len(res)))
	w.m.writerWritten.Add(float64(out.Inserted))
	w.m.writerDup.Add(float64(out.Duplicates))
	w.m.writerReused.Add(float64(out.Reused))
	if len(moved) > 0 {
		// A failure only leaves replays one status behind (statuscache.go).
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.FlushTimeout)
		_ = CacheStatuses(sctx, w.rdb, moved, w.log)
		cancel()
	}
	return nil
}

// productNames returns the names of the batch's products for the item
// snapshot (a map of its own: the batch's products only), reading unknown
// products from MySQL once. Safe for concurrent flushers.
func (w *Writer) productNames(ctx context.Context, batch []order.Reservation) (map[int64]string, error) {
	out := make(map[int64]string, 4)
	for _, r := range batch {
		if _, ok := out[r.ProductID]; ok {
			continue
		}
		w.namesMu.Lock()
		name, ok := w.names[r.ProductID]
		w.namesMu.Unlock()
		if !ok {
			p, err := w.store.GetProduct(ctx, r.ProductID)
			switch {
			case errors.Is(err, persistence.ErrNotFound):
				// An accepted order is never dropped: store it with no name;
				// locking it fails in MySQL and its stock is released.
				w.log.Error("writer: reservation for a product missing in MySQL", "productId", r.ProductID,
					"orderNo", r.OrderNo, "requestId", r.RequestID)
			case err != nil:
				return nil, err
			default:
				name = p.Name
			}
			w.namesMu.Lock()
			w.names[r.ProductID] = name
			w.namesMu.Unlock()
		}
		out[r.ProductID] = name
	}
	return out, nil
}

// ack acknowledges and deletes exactly the given entries and drops the
// pending-order records (reserve.lua's hash …:order:<orderNo>) of their
// orders, now in MySQL: XACK, XDEL and DEL in one MULTI per stream (a
// transaction cannot span hash slots on a cluster; the records share the
// stream's tag). The idempotency record and the user's held count stay for
// their TTL; only the copy of what MySQL now holds goes, so Redis keeps per
// stored order just what idempotency and the per-user limit need, and the
// sweeper's lost-reservation scan walks the orders not yet written instead
// of the day's orders.
func (w *Writer) ack(ctx context.Context, es []entry) error {
	if len(es) == 0 {
		return nil
	}
	type acks struct{ ids, records []string }
	byStream := map[string]*acks{}
	for _, e := range es {
		a := byStream[e.stream]
		if a == nil {
			a = &acks{}
			byStream[e.stream] = a
		}
		a.ids = append(a.ids, e.msg.ID)
		if no, _ := e.msg.Values[lua.FieldOrderNo].(string); no != "" {
			if _, shard, pid, err := order.ParseNo(no); err == nil && lua.ShardKeys(pid, shard).Intake() == e.stream {
				a.records = append(a.records, lua.ShardKeys(pid, shard).Order(no))
			}
		}
	}
	for stream, a := range byStream {
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			if attempt > 0 && !sleep(ctx, w.cfg.RetryMin) {
				break
			}
			_, err = w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.XAck(ctx, stream, w.cfg.Group, a.ids...)
				p.XDel(ctx, stream, a.ids...)
				if len(a.records) > 0 {
					p.Unlink(ctx, a.records...)
				}
				return nil
			})
			if err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("writer: ack %s: %w", stream, err)
		}
	}
	return nil
}

// bury copies unparseable entries to their dead stream, then acknowledges
// and deletes them.
func (w *Writer) bury(ctx context.Context, es []entry, errs []error) error {
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range es {
			vals := []any{"id", e.msg.ID, "error", errs[i].Error()}
			for k, v := range e.msg.Values {
				vals = append(vals, "f:"+k, v)
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: lua.DeadStream(e.stream), MaxLen: w.cfg.DeadMaxLen, Approx: true, Values: vals})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writer: move to dead stream: %w", err)
	}
	for i, e := range es {
		no, _ := e.msg.Values["o"].(string)
		req, _ := e.msg.Values[lua.FieldRequest].(string)
		w.log.Error("writer: unparseable intake entry moved to dead stream", "stream", e.stream, "id", e.msg.ID,
			"orderNo", no, "requestId", req, "err", errs[i])
	}
	w.m.writerDead.Add(float64(len(es)))
	return w.ack(ctx, es)
}
