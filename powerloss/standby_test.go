package powerloss_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mqlite/mqlite/powerloss/forgetfs"
)

// envStandby makes a store worker a hot standby (Config.WaitForLock).
const envStandby = "MQLITE_POWERLOSS_STANDBY"

// TestPowerLossStandby: after each power cut, the machine comes back with
// a primary and a standby on the file. The primary opens at once (no lock
// of the dead processes keeps it out), works, and is SIGKILLed; the
// standby takes over and works until the next cut. Every check of
// TestPowerLoss then holds over the primary's and the standby's
// acknowledged commits together.
func TestPowerLossStandby(t *testing.T) {
	t.Parallel()
	syncModes(t, func(t *testing.T, name string, full bool) {
		seed, rng := seeded(t, 11)
		r := newRig(t)
		var tally storeTally
		sends := map[string]int64{}
		var takeovers []float64 // ms
		cuts := cutsWanted(3)
		for cycle := 1; cycle <= cuts; cycle++ {
			r.powerOn()
			var acks []ack
			keep := func(f []string) {
				if len(f) >= 2 && f[0] != "stop" && f[0] != "waiting" {
					n, _ := strconv.Atoi(f[1])
					acks = append(acks, ack{op: n, kind: f[0], fields: f})
				}
			}
			primary := r.start("store", plDB, seed+uint64(cycle), 2*cycle, full)
			primary.expect("ready", keep) // at once: the dead processes' locks died with them
			standby := r.start("store", plDB, seed+uint64(cycle)+1<<32, 2*cycle+1, full, envStandby+"=1")
			standby.expect("waiting", nil)
			for want := 20 + rng.IntN(100); len(acks) < want; {
				keep(primary.next())
			}
			primary.kill(keep)
			killed := time.Now()
			standby.expect("ready", keep)
			takeovers = append(takeovers, float64(time.Since(killed).Microseconds())/1000)
			r.fs.CutAfter(1+rng.IntN(2000), &forgetfs.CutOptions{Tear: rng.IntN(2) == 0, Rand: rand.New(rand.NewPCG(seed, uint64(cycle)))})
			r.waitCut(standby)
			standby.kill(keep)
			r.powerOff()
			tally.cuts++
			tally.acked += len(acks)
			checkStoreCut(t, r, full, cycle, acks, sends, &tally)
		}
		t.Logf("synchronous=%s: %d cuts, each followed by a primary that opened at once and a standby that took over after its SIGKILL (median %.0f ms, most %.0f ms, from the kill to its first line); %d acknowledged commits, %d lost (%d holes), integrity ok %d times",
			name, tally.cuts, median(takeovers), slices.Max(takeovers), tally.acked, tally.lost, tally.holes, tally.integrityOK)
	})
}
