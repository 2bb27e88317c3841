package pipeline

import (
	"math"
	"testing"
	"time"
)

// simPipeline is a model of the order pipeline for levelControl: admitted
// buyers order orderDelay later; the writers move the intake into
// PROCESSING every 50 ms; the consumer settles PROCESSING orders in
// batches of up to batch, a batch of n taking base + n/perSecond.
type simPipeline struct {
	batch              int
	base               time.Duration
	perSecond          float64
	orderDelay         time.Duration
	ordersAt           []time.Duration // when each live admission orders
	intake, processing int64
	accepted, settled  int64
	busyUntil          time.Duration
	inBatch            int64
	nextWrite          time.Duration
	live               int64
	stallEvery, stall  time.Duration // the consumer stalls stall in every stallEvery (a loaded machine)
}

func (sp *simPipeline) advance(now time.Duration) {
	for len(sp.ordersAt) > 0 && sp.ordersAt[0] <= now {
		sp.ordersAt = sp.ordersAt[1:]
		sp.live--
		sp.intake++
		sp.accepted++
	}
	if now >= sp.nextWrite {
		sp.processing += sp.intake
		sp.intake = 0
		sp.nextWrite = now + 50*time.Millisecond
	}
	if sp.stallEvery > 0 && now%sp.stallEvery < sp.stall {
		return
	}
	if sp.inBatch > 0 && now >= sp.busyUntil {
		sp.processing -= sp.inBatch
		sp.settled += sp.inBatch
		sp.inBatch = 0
	}
	if sp.inBatch == 0 && sp.processing > 0 {
		sp.inBatch = min(sp.processing, int64(sp.batch))
		sp.busyUntil = now + sp.base + time.Duration(float64(sp.inBatch)/sp.perSecond*float64(time.Second))
	}
}

// The controller holds a batching pipeline's backlog within ±25 % of
// TargetBacklog seconds of its drain once the ramp is over, and never far
// above it, with the pacer's default periods.
func TestLevelControlHoldsTheBacklog(t *testing.T) {
	cfg := PacerConfig{}
	cfg.setDefaults()
	for _, tc := range []struct {
		name       string
		batch      int
		perSecond  float64
		stallEvery time.Duration
	}{{"600/s in batches of 256", 256, 800, 0}, {"2000/s in batches of 256", 256, 2600, 0}, {"150/s in batches of 64", 64, 200, 0},
		{"stalling 0.5 s in every 1.7 s", 256, 800, 1700 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &simPipeline{batch: tc.batch, base: 50 * time.Millisecond, perSecond: tc.perSecond, orderDelay: 30 * time.Millisecond,
				stallEvery: tc.stallEvery, stall: 500 * time.Millisecond}
			lc := newLevelControl(cfg)
			t0 := time.Unix(1_700_000_000, 0)
			const tick = 10 * time.Millisecond
			var carry float64
			var samples []float64
			var settledAt5 int64
			var backlogs []int64
			for now := time.Duration(0); now < 25*time.Second; now += tick {
				sp.advance(now)
				if now%cfg.Interval == 0 {
					rate, most := lc.ask(t0.Add(now), cfg)
					acc := carry + rate*cfg.Interval.Seconds()
					n := math.Min(math.Floor(acc), float64(most))
					carry = acc - math.Floor(acc)
					for range int(n) {
						sp.ordersAt = append(sp.ordersAt, now+sp.orderDelay)
					}
					sp.live += int64(n)
					lc.admitted(int(n), true)
				}
				if now%cfg.MeasureEvery == 0 {
					lc.measured(t0.Add(now), sp.intake+sp.processing, sp.live, sp.accepted, cfg)
					if now == 5*time.Second {
						settledAt5 = sp.settled
					}
					if now > 5*time.Second {
						backlogs = append(backlogs, sp.intake+sp.processing)
					}
				}
			}
			drain := float64(sp.settled-settledAt5) / 20
			in := 0
			worst := 0.0
			for _, b := range backlogs {
				s := float64(b) / drain
				samples = append(samples, s)
				worst = max(worst, s)
				if math.Abs(s-2) <= 0.5 {
					in++
				}
			}
			share := float64(in) / float64(len(samples))
			t.Logf("drain %.0f/s, %d samples, %.0f %% within ±25 %% of 2 s, max %.2f s", drain, len(samples), 100*share, worst)
			if share < 0.8 || worst > 2.75 {
				t.Fatalf("backlog not held: %.0f %% of samples within ±25 %% of 2 s, max %.2f s", 100*share, worst)
			}
		})
	}
}
