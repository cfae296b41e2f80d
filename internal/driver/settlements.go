package driver

// Op is a settlement operation.
type Op string

// The settlement operations.
const (
	OpComplete Op = "complete"
	OpAbandon  Op = "abandon"
	OpReject   Op = "reject"
	OpDefer    Op = "defer"
	// OpRelease gives back a delivery its holder never started: Abandon
	// at once that takes back the delivery the claim counted, so it never
	// dead-letters. A retry of the same release replays from its receipt.
	OpRelease Op = "release"
)

// Settlement is one fenced settlement request. Everything in it but
// Worker is part of the receipt key: a retry must repeat the request
// exactly to replay.
type Settlement struct {
	Op          Op
	Queue       string
	Seq         int64
	Token       string
	DelayMS     int64  // Abandon
	LastError   string // Abandon: why the delivery came back; "" keeps the message's last one
	Reason      string // Reject
	Description string // Reject
	Now         int64
	// Worker names who held the delivery, for the attempt an Abandon or a
	// Reject records in the message's history (Row.Attempts); "" for
	// none known.
	Worker string
}

// RenewRequest is one lease to extend.
type RenewRequest struct {
	Queue string
	Seq   int64
	Token string
	Now   int64
}

// SweepBatch is how many rows one sweep statement changes at most. A sweep
// over a large backlog runs batch after batch, each its own short write, so
// claims and sends interleave with it instead of waiting behind one long
// statement.
const SweepBatch = 500

// SweepCheckpointEvery is how many sweep batches run between two waits for
// the checkpointer (Driver.CheckpointEvery): a batch appends a few dozen
// log frames, so a long sweep keeps the log small.
const SweepCheckpointEvery = 16

// ReceiptBatch is how many completed messages one CompactReceipts
// turns: fewer than SweepBatch, since each costs two row writes and a
// receipt (BenchmarkJanitorReceipts keeps each statement within a few ms).
const ReceiptBatch = 200
