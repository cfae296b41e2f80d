//go:build crash_injection

package crashtest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/outbox"
)

// The server crash test: a PostgreSQL server of the test's own
// (pgtest.StartCluster, fsync on) under two worker processes, a sender
// (business transactions that send inputs, each acknowledged after its
// commit returned) and a consumer (consumer.LoopTx, an effect row and an
// onward message per input, committed with the completion). The harness
// SIGKILLs the server at random moments and restarts it; after each
// restart both workers must make progress again on their own (a consumer
// never stops silently); at the end every acknowledged send is there,
// every effect row exists exactly when its input is completed, never
// twice. The controls pause a mutant worker where the harm is, kill the
// server there, and show the check failing: a sender that acknowledges
// before its commit loses acknowledged sends; a consumer that completes
// after its effect's commit, in a second transaction, leaves an effect
// without its completion, or twice.

const (
	senderWorker   = "TestCrashServerSender"
	serverRestarts = 5
	envAckEarly    = "MQLITE_CRASH_ACK_EARLY" // "1": the sender acknowledges before its commit
	recoverBudget  = time.Minute              // for the workers to make progress after a restart
)

// TestCrashServerSender is the sender process of the server crash test:
// batches of one to eight inputs, each batch in a transaction of its own,
// acknowledged ("ack <seq>") after the commit returned; a failed
// transaction ("senderr") is tried anew after a moment. With
// envAckEarly, the acknowledgements come before the commit.
func TestCrashServerSender(t *testing.T) {
	st, rng, seed := startWorker(t, 1)
	defer st.Close()
	early := os.Getenv(envAckEarly) == "1"
	say := func(format string, args ...any) { fmt.Fprintf(os.Stdout, linePrefix+format+"\n", args...) }
	say("ready")
	stop := time.Now().Add(5 * time.Minute) // a safety net; the harness kills long before
	for n := 0; time.Now().Before(stop); n++ {
		msgs := make([]outbox.Message, 1+rng.IntN(8))
		for i := range msgs {
			msgs[i] = outbox.Message{Body: fmt.Appendf(nil, "input s%d-%d-%d", seed, n, i)}
		}
		var seqs []int64
		err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
			seqs = seqs[:0]
			res, err := outbox.SendBatch(tx.Context(), tx.SQL(), effectsIn, msgs)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
				seqs = append(seqs, r.Seq)
				if early {
					say("ack %d", r.Seq) // the mutant: before the commit
				}
			}
			maybeCrash(inSendTx)
			return nil
		})
		if err != nil {
			say("senderr")
			time.Sleep(20 * time.Millisecond) // the server may be down: a moment before the next try
			continue
		}
		if !early {
			for _, seq := range seqs {
				say("ack %d", seq)
			}
		}
		time.Sleep(10 * time.Millisecond) // the consumer's pace, about: the inputs stay few
	}
}

// serverWorker is a worker process of the server crash test.
type serverWorker struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	killed bool
}

// workerLine is a line a worker said, or its end (eof).
type workerLine struct {
	w    *serverWorker
	text string
	eof  bool
}

// serverRun is the harness's state: the workers' lines, what they
// acknowledged and completed.
type serverRun struct {
	t       *testing.T
	c       *pgtest.Cluster
	r       *effectsRun
	lines   chan workerLine
	acked   map[int64]bool
	senderr int
	paused  string
}

// spawn starts worker on the cluster's database with env added, and waits
// for it to be ready.
func (s *serverRun) spawn(worker string, seed uint64, env ...string) *serverWorker {
	t := s.t
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+worker+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envWorker+"="+s.c.URL(), fmt.Sprintf("%s=%d", envSeed, seed), envPoint+"=")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &serverWorker{name: worker, cmd: cmd, stdin: stdin}
	t.Cleanup(func() { w.kill() })
	ready := make(chan struct{})
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				s.lines <- workerLine{w: w, eof: true}
				return
			}
			rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), linePrefix)
			if !ok {
				continue
			}
			if rest == "ready" {
				close(ready)
				continue
			}
			s.lines <- workerLine{w: w, text: rest}
		}
	}()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatalf("%s never got ready", worker)
	}
	return w
}

// kill SIGKILLs the worker and reaps it.
func (w *serverWorker) kill() {
	if w.killed {
		return
	}
	w.killed = true
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

// read handles one line; a worker that ends before the harness killed it
// fails the test: a consumer never stops silently.
func (s *serverRun) read(l workerLine) {
	s.t.Helper()
	if l.eof {
		if !l.w.killed {
			s.t.Fatalf("%s stopped on its own: %v", l.w.name, l.w.cmd.Wait())
		}
		return
	}
	f := strings.Fields(l.text)
	switch {
	case len(f) == 2 && f[0] == "ack":
		seq, _ := strconv.ParseInt(f[1], 10, 64)
		s.acked[seq] = true
	case len(f) == 1 && f[0] == "senderr":
		s.senderr++
	case len(f) == 2 && f[0] == "paused":
		s.paused = f[1]
	default:
		s.r.read(l.text)
	}
}

// pump reads the workers' lines for d.
func (s *serverRun) pump(d time.Duration) {
	s.t.Helper()
	end := time.After(d)
	for {
		select {
		case l := <-s.lines:
			s.read(l)
		case <-end:
			return
		}
	}
}

// until reads the workers' lines until ok holds, failing after recoverBudget.
func (s *serverRun) until(what string, ok func() bool) {
	s.t.Helper()
	deadline := time.After(recoverBudget)
	for !ok() {
		select {
		case l := <-s.lines:
			s.read(l)
		case <-deadline:
			s.t.Fatalf("no %s in %v", what, recoverBudget)
		}
	}
}

// stop kills the workers and reads what they said.
func (s *serverRun) stop(ws ...*serverWorker) {
	for _, w := range ws {
		w.kill()
	}
	for left := len(ws); left > 0; {
		l := <-s.lines
		if l.eof {
			left--
		}
		s.read(l)
	}
}

// newServerRun starts a server of the test's own and readies the effects
// queues and table in it.
func newServerRun(t *testing.T) *serverRun {
	c := pgtest.StartCluster(t)
	return &serverRun{t: t, c: c, r: setupEffectsOn(t, c.URL()), lines: make(chan workerLine, 1<<16), acked: map[int64]bool{}}
}

// lostAcks counts the acknowledged sends that are not in the database:
// no message row and no effect row (a completed input whose receipt the
// janitor removed has its effect row).
func (s *serverRun) lostAcks() int {
	s.t.Helper()
	return lostAcks(s.t, s.c.URL(), s.acked)
}

// lostAcks counts the seqs of acked that have no message row and no
// effect row in the PostgreSQL database at url.
func lostAcks(t *testing.T, url string, acked map[int64]bool) int {
	t.Helper()
	db, err := rawOpen(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seqs := make([]string, 0, len(acked))
	for seq := range acked {
		seqs = append(seqs, strconv.FormatInt(seq, 10))
	}
	var n int
	err = db.QueryRow(`SELECT count(*) FROM unnest(string_to_array($1, ',')::bigint[]) a(id)
		WHERE NOT EXISTS (SELECT 1 FROM mqlite_messages m WHERE m.id = a.id)
		  AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.seq = a.id)`, strings.Join(seqs, ",")).Scan(&n)
	if err != nil {
		t.Fatalf("lost acknowledgements: %v", err)
	}
	return n
}

// inputsOfAcks adds the acknowledged sends to the inputs the check looks at.
func (s *serverRun) inputsOfAcks() {
	known := map[int64]bool{}
	for _, seq := range s.r.inputs {
		known[seq] = true
	}
	for seq := range s.acked {
		if !known[seq] {
			s.r.inputs = append(s.r.inputs, seq)
		}
	}
	slices.Sort(s.r.inputs)
}

// TestCrashPostgresServer is the harness of the server crash test.
func TestCrashPostgresServer(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	s := newServerRun(t)
	consumer := s.spawn(loopTxWorker, seed)
	sender := s.spawn(senderWorker, seed+1)
	restarts := 0
	for restarts < serverRestarts {
		s.pump(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		s.c.Kill()
		s.pump(time.Duration(50+rng.IntN(500)) * time.Millisecond)
		s.c.Restart()
		restarts++
		done, acked := len(s.r.done), len(s.acked)
		s.until(fmt.Sprintf("progress of both workers after restart %d", restarts), func() bool {
			return len(s.r.done) >= done+5 && len(s.acked) >= acked+5
		})
	}
	s.pump(time.Second)
	s.stop(consumer, sender)
	s.inputsOfAcks()
	a := s.r.check(t)
	lost := s.lostAcks()
	var maxCount int
	db, err := rawOpen(s.c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT coalesce(max(delivery_count), 0) FROM mqlite_messages`).Scan(&maxCount); err != nil {
		t.Fatal(err)
	}
	t.Logf("survived %d SIGKILLs of the PostgreSQL server, each followed by progress of both workers: %d acknowledged sends (%d transactions failed while the server was down), %d lost; %d inputs, %d completed (%d reported by the Loop), %d dead-lettered on purpose, %d effect rows, %d onward messages; %d effects without completion, %d completed without effect, %d twice; most deliveries of a message %d (bound %d); %d leases lapsed under the consumer (%d commits stalled past their lease)",
		restarts, len(s.acked), s.senderr, lost, a.inputs, a.completed, len(s.r.done), a.dead, a.rows, a.onward,
		a.withoutCompletion, a.withoutRow, a.twice, maxCount, effectsMax, s.r.lapsed, s.r.stalled)
	if lost > 0 || a.violations() > 0 || maxCount > effectsMax {
		t.Fatalf("%d acknowledged sends lost, %d effect violations", lost, a.violations())
	}
}

// TestCrashPostgresServerControl shows the server crash test's checks can
// fail: each mutant pauses where its harm is, and the harness kills the
// server there.
func TestCrashPostgresServerControl(t *testing.T) {
	t.Run("AckBeforeCommit", func(t *testing.T) {
		s := newServerRun(t)
		sender := s.spawn(senderWorker, 1, envPoint+"="+inSendTx, envPause+"=1", envAckEarly+"=1")
		s.until("pause of the sender", func() bool { return s.paused != "" })
		s.c.Kill()
		if _, err := io.WriteString(sender.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		s.until("failed commit", func() bool { return s.senderr > 0 })
		s.c.Restart()
		s.stop(sender)
		lost := s.lostAcks()
		t.Logf("control, acknowledged before the commit, the server killed before it: %d acknowledged sends, %d lost", len(s.acked), lost)
		if lost == 0 {
			t.Fatal("a server killed between the acknowledgement and the commit lost no acknowledged send")
		}
	})
	t.Run("CompleteOutsideTx", func(t *testing.T) {
		s := newServerRun(t)
		consumer := s.spawn(twoTxWorker, 1, envPoint+"="+afterCommit, envPause+"=1")
		s.until("pause of the consumer", func() bool { return s.paused != "" })
		s.c.Kill()
		if _, err := io.WriteString(consumer.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		s.pump(2 * effectsLease) // the completion fails; the lease lapses
		s.c.Restart()
		s.pump(2 * time.Second) // the message comes back, and its effect is written again
		s.stop(consumer)
		a := s.r.check(t)
		t.Logf("control, the completion after the effect's commit, the server killed between: %d effects without completion, %d twice", a.withoutCompletion, a.twice)
		if a.withoutCompletion+a.twice == 0 {
			t.Fatal("a server killed between the effect's commit and the completion left no effect without its completion, and none twice")
		}
	})
}
