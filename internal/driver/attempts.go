package driver

import "fmt"

// AttemptRequest names the options of a Receive that a replay of its
// attempt id must repeat: what a receive attempt records beside its result.
func AttemptRequest(r ClaimRequest) string {
	mode := "peek-lock"
	if r.Delete {
		mode = "receive-and-delete"
	}
	return fmt.Sprintf("max=%d mode=%s", r.Max, mode)
}

// KeepHeld is what a replayed attempt hands out of the rows it recorded:
// those still held under their lease, held giving each one's lease end as
// it is now (renewals since count), in the recorded order. It reuses rows.
func KeepHeld(rows []Row, held map[int64]int64) []Row {
	kept := rows[:0]
	for _, m := range rows {
		if until, ok := held[m.Seq]; ok {
			m.LockedUntil = until
			kept = append(kept, m)
		}
	}
	return kept
}
