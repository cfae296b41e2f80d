package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// sendBatch is how many lines of --file go in one request.
const sendBatch = 100

func sendCmd(g *globals) *cobra.Command {
	var (
		file, id, group, subject string
		props                    []string
		delay, ttl               time.Duration
		priority                 int
	)
	cmd := &cobra.Command{
		Use:   "send QUEUE [BODY]",
		Short: "send a message, or one message per line of a file",
		Long: `send sends BODY to QUEUE (or to a topic: each matching subscription gets a copy).
A BODY of "-" reads the body from standard input, whole (up to the store's
message limit): mqlite send orders - < order.json.
With --file, every line of the file ("-" for standard input) is one message,
sent in batches of 100 with a progress bar.`,
		Example: `  mqlite send orders '{"id":1}' --message-id order-1 --db app.db
  mqlite send orders - --db app.db < order.json
  mqlite send orders --file events.jsonl --url http://127.0.0.1:7420 --key $KEY`,
		Args:              rangeArgs(1, 2),
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 2) == (file != "") {
				return usagef("give a BODY or --file, not both and not neither")
			}
			base := outbox.Message{MessageID: id, GroupID: group, Subject: subject, TTL: ttl, Priority: priority}
			if delay > 0 {
				base.DeliverAt = time.Now().Add(delay)
			}
			var err error
			if base.Properties, err = parseProps(props); err != nil {
				return err
			}
			if file == "" {
				if base.Body, err = bodyArg(cmd.InOrStdin(), args[1]); err != nil {
					return err
				}
			}
			return g.with(cmd.Context(), func(b backend) error {
				if file == "" {
					res, err := b.SendBatch(cmd.Context(), args[0], []outbox.Message{base})
					if err != nil {
						return err
					}
					if res[0].Err != nil {
						return res[0].Err
					}
					r := wire.FromResult(res[0])
					return g.emit(r, func(w io.Writer) { printResult(w, r) })
				}
				if id != "" {
					return usagef("--message-id cannot go with --file: each line would share it")
				}
				return g.sendFile(cmd, b, args[0], file, base)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "send each line of `FILE` as a message (- for standard input)")
	f.StringVar(&id, "message-id", "", "the message id, for de-duplication")
	f.StringVar(&group, "group", "", "the group id: messages of a group are delivered in order")
	f.StringVar(&subject, "subject", "", "the subject")
	f.StringArrayVar(&props, "prop", nil, "a property `key=value` (repeat)")
	f.DurationVar(&delay, "delay", 0, "deliver no earlier than this long from now")
	f.DurationVar(&ttl, "ttl", 0, "the time to live (default: the queue's)")
	f.IntVar(&priority, "priority", 0, fmt.Sprintf("the priority, 0 to %d: a higher one is received first", mqlite.MaxPriority))
	return cmd
}

// bodyArg is the body send's BODY argument names: arg itself, or all of
// stdin for "-" (up to mqlite.MaxMessageBytesLimit, past which no store
// takes it).
func bodyArg(stdin io.Reader, arg string) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	body, err := io.ReadAll(io.LimitReader(stdin, mqlite.MaxMessageBytesLimit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the body from standard input: %w", err)
	case len(body) > mqlite.MaxMessageBytesLimit:
		return nil, fmt.Errorf("the body on standard input is over %d bytes, the most a store takes: %w",
			mqlite.MaxMessageBytesLimit, mqlite.ErrMessageTooLarge)
	}
	return body, nil
}

// parseProps reads the values of --prop flags; none is a nil map.
func parseProps(props []string) (map[string]string, error) {
	if len(props) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, p := range props {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, usagef("--prop %q: want key=value", p)
		}
		out[k] = v
	}
	return out, nil
}

func printResult(w io.Writer, r wire.SendResult) {
	switch {
	case len(r.Copies) == 0:
		fmt.Fprintln(w, "sent to no subscription (nothing written)")
	case len(r.Copies) == 1 && r.Duplicate:
		fmt.Fprintf(w, "duplicate of seq %d (nothing written)\n", r.Seq)
	case len(r.Copies) == 1:
		fmt.Fprintf(w, "sent seq %d\n", r.Seq)
	default:
		for _, c := range r.Copies {
			fmt.Fprintf(w, "sent to %s\tseq %d\n", c.Queue, c.Seq)
		}
	}
}

// sendFile sends each line of path in batches.
func (g *globals) sendFile(cmd *cobra.Command, b backend, queue, path string, base outbox.Message) error {
	var in io.Reader = cmd.InOrStdin()
	total := int64(-1) // lines, when known
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
		if g.barShown() {
			if total, err = countLines(f); err != nil {
				return err
			}
		}
	}
	bar := g.bar(total, "sending", "lines")
	defer bar.Close()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), mqlite.MaxMessageBytesLimit)
	var sent, dups, lines int
	var batch []outbox.Message
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		res, err := b.SendBatch(cmd.Context(), queue, batch)
		if err != nil {
			return fmt.Errorf("lines %d-%d: %w", lines-len(batch)+1, lines, err)
		}
		for i, r := range res {
			switch {
			case r.Err != nil:
				return fmt.Errorf("line %d: %w", lines-len(batch)+1+i, r.Err)
			case r.Duplicate:
				dups++
			default:
				sent++
			}
		}
		batch = batch[:0]
		return nil
	}
	for sc.Scan() {
		lines++
		m := base
		m.Body = append([]byte(nil), sc.Bytes()...)
		batch = append(batch, m)
		_ = bar.Add(1)
		if len(batch) == sendBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	_ = bar.Finish()
	return g.emit(map[string]int{"lines": lines, "sent": sent, "duplicates": dups}, func(w io.Writer) {
		fmt.Fprintf(w, "sent %d messages from %d lines (%d duplicates)\n", sent, lines, dups)
	})
}

// countLines counts the lines of f (a last one without a newline too) and
// rewinds it, so that the progress bar of send --file counts lines.
func countLines(f *os.File) (int64, error) {
	var n int64
	last := byte('\n')
	buf := make([]byte, 256<<10)
	for {
		k, err := f.Read(buf)
		if k > 0 {
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	_, err := f.Seek(0, io.SeekStart)
	return n, err
}

// printMessages prints messages as a table: one line each. settled, when
// not empty, is what the command did to each one (the STATE shown).
func printMessages(w io.Writer, msgs []mqlite.Message, dead bool, settled string) {
	if len(msgs) == 0 {
		fmt.Fprintln(w, "no messages")
		return
	}
	if dead {
		fmt.Fprintln(w, "SEQ\tDELIVERIES\tREASON\tFAILURES\tLAST ERROR\tBODY")
	} else {
		fmt.Fprintln(w, "SEQ\tSTATE\tPRIORITY\tDELIVERIES\tSUBJECT\tFAILURES\tLAST ERROR\tBODY")
	}
	for _, m := range msgs {
		if dead {
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\n", m.Seq, m.DeliveryCount, m.DeadLetterReason, failures(m), lastError(m), bodyText(m.Body))
			continue
		}
		state := string(m.State)
		switch {
		case settled != "":
			state = settled
		case state == "":
			state = "locked"
			if m.LockToken == "" {
				state = "received"
			}
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", m.Seq, state, m.Priority, m.DeliveryCount, m.Subject, failures(m), lastError(m), bodyText(m.Body))
	}
}

// failures is how many failed deliveries the message's history keeps and
// who held the last one ("2, last by host:1/loop-1"), or "-" for none;
// --json carries the whole history (attempts).
func failures(m mqlite.Message) string {
	if len(m.Attempts) == 0 {
		return "-"
	}
	last := m.Attempts[len(m.Attempts)-1]
	if last.Worker == "" {
		return fmt.Sprint(len(m.Attempts))
	}
	return fmt.Sprintf("%d, last by %s", len(m.Attempts), last.Worker)
}

// lastError is the message's last error on one line, cut to 60 bytes
// (--json carries it whole), or "-".
func lastError(m mqlite.Message) string {
	if m.LastError == "" {
		return "-"
	}
	s := strings.Join(strings.Fields(m.LastError), " ")
	if len(s) > 60 {
		s = strings.ToValidUTF8(s[:57], "") + "..."
	}
	return s
}

// jsonMessage is a message as --json prints it: the broker's fields, but
// the body as JSON when it is valid JSON, and in body_base64 otherwise
// (the wire's base64 of every body is for programs, not for jq).
type jsonMessage struct {
	wire.ReceivedMessage
	Body       json.RawMessage `json:"body,omitempty"`
	BodyBase64 []byte          `json:"body_base64,omitempty"`
}

// jsonMessages is the --json answer of receive, peek and dlq list.
type jsonMessages struct {
	Messages []jsonMessage `json:"messages"`
}

// toJSON converts msgs for --json; settled, when not empty, is the state
// the command left them in.
func toJSON(msgs []mqlite.Message, settled string) jsonMessages {
	out := jsonMessages{Messages: make([]jsonMessage, len(msgs))}
	for i, m := range msgs {
		j := jsonMessage{ReceivedMessage: wire.FromMessage(m)}
		if json.Valid(m.Body) {
			j.Body = m.Body
		} else {
			j.BodyBase64 = m.Body
			if j.BodyBase64 == nil {
				j.BodyBase64 = []byte{}
			}
		}
		if settled != "" {
			j.State = settled
		}
		out.Messages[i] = j
	}
	return out
}

// bodyText shows a body: as text when it is UTF-8, shortened.
func bodyText(b []byte) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes of binary)", len(b))
	}
	s := strings.ReplaceAll(string(b), "\n", `\n`)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func receiveCmd(g *globals) *cobra.Command {
	var (
		max                int
		wait               time.Duration
		complete, del, abd bool
		reject             string
	)
	cmd := &cobra.Command{
		Use:   "receive QUEUE",
		Short: "receive messages (peek-lock), and settle them",
		Long: `receive claims up to --max messages of QUEUE, waiting up to --wait for the first,
and prints them. By default they stay locked until their lease ends (then they
come again); --complete, --abandon or --reject settles each one after printing,
and --delete receives them in receive-and-delete mode (at most once).`,
		Example: `  mqlite receive orders --max 10 --complete --db app.db
  mqlite receive orders --reject "bad schema" --url http://127.0.0.1:7420 --key $KEY`,
		ValidArgsFunction: g.completeQueues,
		Args:              exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			for _, on := range []bool{complete, del, abd, reject != ""} {
				if on {
					n++
				}
			}
			if n > 1 {
				return usagef("--complete, --abandon, --reject and --delete exclude each other")
			}
			opts := mqlite.ReceiveOptions{Max: max, Wait: wait}
			if del {
				opts.Mode = mqlite.ReceiveAndDelete
			}
			return g.with(cmd.Context(), func(b backend) error {
				msgs, err := b.Receive(cmd.Context(), args[0], opts)
				if err != nil {
					return err
				}
				// An abandon on a message's last allowed delivery dead-letters
				// it: said per message when the queue's limit can be read.
				maxDelivery := 0
				if abd && len(msgs) > 0 {
					if q, qerr := b.GetQueue(cmd.Context(), args[0]); qerr == nil {
						maxDelivery = q.Options.MaxDeliveryCount
					}
				}
				deadLettered := 0
				for i, m := range msgs {
					switch {
					case complete:
						err = b.Complete(cmd.Context(), m.Lock())
					case abd:
						err = b.Abandon(cmd.Context(), m.Lock(), 0)
						msgs[i].State = "abandoned"
						if err == nil && maxDelivery > 0 && m.DeliveryCount >= maxDelivery {
							msgs[i].State = mqlite.StateDeadLettered
							deadLettered++
						}
					case reject != "":
						err = b.Reject(cmd.Context(), m.Lock(), reject, "rejected with mqlite receive")
					}
					if err != nil {
						return fmt.Errorf("seq %d: %w", m.Seq, err)
					}
				}
				paused := len(msgs) == 0 && queuePaused(cmd.Context(), b, args[0])
				settled := ""
				switch {
				case complete:
					settled = "completed"
				case reject != "":
					settled = "dead_lettered"
				case del:
					settled = "deleted"
				}
				return g.emit(toJSON(msgs, settled), func(w io.Writer) {
					if paused {
						fmt.Fprintf(w, "no messages: queue %s is paused, so receive hands none out (mqlite queues resume %s)\n", args[0], args[0])
						return
					}
					printMessages(w, msgs, false, settled)
					switch {
					case len(msgs) == 0:
					case complete:
						fmt.Fprintf(w, "completed %d\n", len(msgs))
					case abd && deadLettered == len(msgs):
						fmt.Fprintf(w, "dead-lettered %d (abandoned on the last allowed delivery)\n", deadLettered)
					case abd && deadLettered > 0:
						fmt.Fprintf(w, "abandoned %d, dead-lettered %d (abandoned on the last allowed delivery)\n", len(msgs)-deadLettered, deadLettered)
					case abd:
						fmt.Fprintf(w, "abandoned %d\n", len(msgs))
					case reject != "":
						fmt.Fprintf(w, "dead-lettered %d\n", len(msgs))
					}
				})
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&max, "max", 1, "how many messages at most")
	f.DurationVar(&wait, "wait", 0, "how long to wait for a first message")
	f.BoolVar(&complete, "complete", false, "complete each message after printing it")
	f.BoolVar(&abd, "abandon", false, "abandon each message after printing it (it comes again; on its last allowed delivery it is dead-lettered)")
	f.StringVar(&reject, "reject", "", "dead-letter each message with this `reason`")
	f.BoolVar(&del, "delete", false, "receive-and-delete: no lock, at most once")
	return cmd
}

// queuePaused reports whether queue is paused, as far as b lets the
// command know (a consumer key through a broker cannot read it: false).
func queuePaused(ctx context.Context, b backend, queue string) bool {
	q, err := b.GetQueue(ctx, queue)
	return err == nil && q.Paused()
}

func peekCmd(g *globals) *cobra.Command {
	var opts mqlite.PeekParams
	cmd := &cobra.Command{
		Use:               "peek QUEUE",
		Short:             "show messages without locking them",
		ValidArgsFunction: g.completeQueues,
		Example:           `  mqlite peek orders --max 20 --db app.db`,
		Args:              exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.read(cmd.Context(), func(b backend) error {
				msgs, err := b.Peek(cmd.Context(), args[0], opts)
				if err != nil {
					return err
				}
				return g.emit(toJSON(msgs, ""), func(w io.Writer) { printMessages(w, msgs, false, "") })
			})
		},
	}
	cmd.Flags().Int64Var(&opts.FromSeq, "from", 0, "the first sequence number")
	cmd.Flags().IntVar(&opts.Max, "max", 100, "how many messages at most (up to 1000)")
	return cmd
}

func deliverNowCmd(g *globals) *cobra.Command {
	var seqs []int64
	cmd := &cobra.Command{
		Use:   "deliver-now QUEUE",
		Short: "make scheduled messages due now (all, or --seq ones)",
		Long: `deliver-now makes scheduled messages of QUEUE claimable at once: those sent
with a deliver-at and those abandoned with a delay (up to a year ahead), all
of them or the --seq ones. A grouped message keeps its group's order.
Through a broker it needs an admin key over the queue.`,
		Example: `  mqlite deliver-now orders --seq 12 --db app.db
  mqlite deliver-now orders --url http://127.0.0.1:7420 --key $KEY`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				n, err := b.DeliverNow(cmd.Context(), args[0], mqlite.DeliverNowOptions{Seqs: seqs})
				if err != nil {
					return err
				}
				return g.emit(wire.CountResponse{Count: n}, func(w io.Writer) { fmt.Fprintf(w, "made %d scheduled messages due\n", n) })
			})
		},
	}
	cmd.Flags().Int64SliceVar(&seqs, "seq", nil, "a scheduled message's sequence number (repeat; default all)")
	return cmd
}
