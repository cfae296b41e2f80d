package powerloss_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/powerloss/forgetfs"
	"github.com/mqlite/mqlite/relay"
)

const (
	relayQueue       = "out"
	relayConcurrency = 4
	relayBatch       = 10
	// relayInFlight bounds the messages the relay holds: LoopBatch claims
	// up to Concurrency × MaxBatch for the sink plus MaxBatch prefetched,
	// and a message keeps its place until its completion has committed.
	relayInFlight = relayConcurrency*relayBatch + relayBatch
)

func init() { workers["relay"] = relayWorker }

// relaySink is the far side: it has a message once the worker said so.
type relaySink struct{}

func (relaySink) Send(_ context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	for _, m := range msgs {
		say("fwd %d", m.Seq)
	}
	return out
}

// relayObserver acknowledges each completion the relay committed.
type relayObserver struct{ consumer.NopObserver }

func (relayObserver) Completed(m mqlite.Message, _ time.Duration) { say("done %d", m.Seq) }

// relayWorker keeps the outbox queue fed and relays it to relaySink:
//
//	fwd <seq>    the far side has it
//	done <seq>   the relay's completion of it committed
func relayWorker(ctx context.Context, w workerEnv) error {
	st, err := mqlite.Open(ctx, w.path, openOpts(w.full))
	if err != nil {
		return err
	}
	defer st.Close()
	err = st.CreateQueue(ctx, relayQueue, mqlite.QueueOptions{MaxDeliveryCount: 1000, LockDuration: time.Hour})
	if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		return err
	}
	rl, err := relay.New(st, relayQueue, relaySink{}, relay.Config{
		Concurrency: relayConcurrency, MaxBatch: relayBatch, Observer: relayObserver{}, DrainTimeout: -1,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	relayed := make(chan error, 1)
	go func() { relayed <- rl.Run(ctx) }()
	say("ready")
	// The application's sends, 20 at a time, while fewer than 100 wait.
	rng := rand.New(rand.NewPCG(w.seed, 3))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-relayed:
			return fmt.Errorf("relay: %w", err)
		case <-tick.C:
		}
		stats, err := st.Stats(ctx, relayQueue)
		if err != nil {
			return err
		}
		if stats.Active >= 100 {
			continue
		}
		msgs := make([]outbox.Message, 20)
		for i := range msgs {
			msgs[i] = outbox.Message{Body: fmt.Appendf(nil, "%d", rng.Uint64())}
		}
		if _, err := outbox.Send(ctx, st, relayQueue, msgs...); err != nil {
			return err
		}
	}
}

// TestPowerLossRelay cuts the power under a relay at random moments. With
// FULL, every message whose completion the relay acknowledged stays
// completed (the relay never forwards it again), and what goes out again
// after the cut is what was in flight: forwarded, not yet completed, at
// most the (Concurrency+1) × MaxBatch messages LoopBatch holds. With NORMAL the numbers of
// completions lost, and of messages forwarded whose send the cut took
// away, are measured.
func TestPowerLossRelay(t *testing.T) {
	t.Parallel()
	syncModes(t, func(t *testing.T, name string, full bool) {
		seed, rng := seeded(t, 5)
		r := newRig(t)
		cuts := cutsWanted(3)
		forwarded, completed, resent, inFlight, lostDone, phantoms, maxResend := 0, 0, 0, 0, 0, 0, 0
		pending := map[int64]bool{} // forwarded, not completed in the file: may go again
		phantom := map[int64]bool{} // forwarded, and the cut took the send
		everFwd := map[int64]bool{}
		reused := 0
		for cycle := 1; cycle <= cuts; cycle++ {
			r.powerOn()
			p := r.start("relay", plDB, seed+uint64(cycle), cycle, full)
			fwd, done := map[int64]bool{}, map[int64]bool{}
			again := 0
			keep := func(f []string) {
				if len(f) != 2 {
					return
				}
				seq, _ := strconv.ParseInt(f[1], 10, 64)
				switch f[0] {
				case "fwd":
					if !fwd[seq] && everFwd[seq] {
						switch {
						case pending[seq]:
							again++
						case phantom[seq]:
							reused++ // a new message under the seq of one whose send the cut took
						default:
							t.Errorf("cut %d: seq %d forwarded again though its completion was in the file", cycle, seq)
						}
					}
					fwd[seq], everFwd[seq] = true, true
				case "done":
					done[seq] = true
				}
			}
			p.expect("ready", keep)
			r.fs.CutAfter(1+rng.IntN(600), &forgetfs.CutOptions{Tear: rng.IntN(2) == 0, Rand: rand.New(rand.NewPCG(seed, uint64(cycle)))})
			r.waitCut(p)
			p.kill(keep)
			r.powerOff()
			forwarded += len(fwd)
			completed += len(done)
			resent += again

			// The file as the cut left it.
			path := r.onDisk(plDB)
			if !integrity(t, path) {
				continue
			}
			high := int64(rawCount(t, path, `SELECT max(coalesce((SELECT max(id) FROM `+tableMessages+`), 0), coalesce((SELECT floor FROM mqlite_sequence), 0))`))
			// Present: in the file and not completed (a completion leaves a
			// completed row until the janitor turns it into a receipt row).
			present := func(seq int64) bool {
				return rawCount(t, path, fmt.Sprintf(`SELECT count(*) FROM %s WHERE id = %d AND state <> 'completed'`, tableMessages, seq)) == 1
			}
			// What may go again: forwarded in this run or pending from an
			// earlier one, and not completed in the file.
			inFlightNow := 0
			for seq := range pending {
				if !present(seq) {
					delete(pending, seq)
				}
			}
			for seq := range fwd {
				switch {
				case seq > high:
					phantoms++ // its send was lost: the far side has a message the file never kept
					phantom[seq] = true
					delete(pending, seq)
				case present(seq):
					pending[seq] = true
					inFlightNow++
				}
			}
			for seq := range done {
				if present(seq) {
					lostDone++
					if full {
						t.Fatalf("cut %d: seq %d: the relay's acknowledged completion is gone under FULL", cycle, seq)
					}
				}
			}
			inFlight += inFlightNow
			maxResend = max(maxResend, inFlightNow)
			if full && inFlightNow > relayInFlight {
				t.Fatalf("cut %d: %d forwarded messages to go again, more than the %d in flight", cycle, inFlightNow, relayInFlight)
			}
			if full && phantoms > 0 {
				t.Fatalf("cut %d: the relay forwarded a message whose send the cut took away under FULL", cycle)
			}
		}
		t.Logf("synchronous=%s: %d cuts; %d messages forwarded, %d completions acknowledged, %d of them lost; forwarded and not completed in the file at the cuts: %d (at most %d in one cut, bound %d); forwarded again after a cut: %d; forwarded though the cut took their send: %d (their seqs reused by %d later messages)",
			name, cuts, forwarded, completed, lostDone, inFlight, maxResend, relayInFlight, resent, phantoms, reused)
	})
}
