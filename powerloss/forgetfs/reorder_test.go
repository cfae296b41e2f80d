package forgetfs_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mqlite/mqlite/powerloss/forgetfs"
)

// reorderWrites are three unsynced writes that overlap nothing: one
// sector over the synced content, a few bytes inside another, and two
// sectors appended.
var reorderWrites = []struct {
	off int64
	b   []byte
}{
	{0, bytes.Repeat([]byte{'a'}, forgetfs.SectorSize)},
	{2*forgetfs.SectorSize + 7, bytes.Repeat([]byte{'b'}, 10)},
	{3 * forgetfs.SectorSize, bytes.Repeat([]byte{'c'}, 2*forgetfs.SectorSize)},
}

// reorderRun writes reorderWrites over a synced file of three sectors and
// cuts with opts: the file as the cut left it, the report, and the synced
// content.
func reorderRun(t *testing.T, opts *forgetfs.CutOptions) (string, forgetfs.Report, []byte) {
	t.Helper()
	base := bytes.Repeat([]byte{'s'}, 3*forgetfs.SectorSize)
	e := setup(t, map[string]string{"f": string(base)})
	f := e.open("f", os.O_RDWR)
	for _, w := range reorderWrites {
		e.writeAt(f, string(w.b), w.off)
	}
	got, rep := e.cut(opts)
	return got["f"], rep, base
}

// TestReorder: with CutOptions.Reorder, a file keeps any subset of its
// unsynced writes, not only a prefix, and nothing else; over many seeds
// the cuts reach subsets that skip an earlier write, every write kept, and
// none.
func TestReorder(t *testing.T) {
	t.Parallel()
	seen := map[string]int{}
	for seed := range uint64(24) {
		got, rep, base := reorderRun(t, &forgetfs.CutOptions{Reorder: true, Rand: rand.New(rand.NewPCG(seed, 1))})
		// Which subset: the only content each subset can give.
		subset := -1
		for mask := range 1 << len(reorderWrites) {
			want := append([]byte(nil), base...)
			for i, w := range reorderWrites {
				if mask&(1<<i) != 0 {
					want = applyAt(want, w.off, w.b)
				}
			}
			if got == string(want) {
				subset = mask
			}
		}
		if subset < 0 {
			t.Fatalf("seed %d: the file (%d bytes) is no subset of the writes; report %+v", seed, len(got), rep)
		}
		prefix := subset&(subset+1) == 0 // writes[:k] for some k
		if !prefix && rep.Reordered == 0 {
			t.Fatalf("seed %d: kept writes %03b, not a prefix, and the report says nothing was reordered: %+v", seed, subset, rep)
		}
		if rep.Kept+rep.Writes != len(reorderWrites) || rep.Torn != 0 {
			t.Fatalf("seed %d: report %+v for %d writes, none torn", seed, rep, len(reorderWrites))
		}
		switch {
		case subset == 0:
			seen["none kept"]++
		case subset == 1<<len(reorderWrites)-1:
			seen["all kept"]++
		case !prefix:
			seen["a later write without an earlier one"]++
		}
	}
	if len(seen) != 3 {
		t.Fatalf("24 seeds reached only %v", seen)
	}
	t.Logf("24 reordered cuts: %v", seen)
}

// TestReorderTear: with Reorder and Tear, every sector of the file holds
// what it held when synced or what one write put there (or, past the
// synced end, zeros), and the seeds reach a write kept in part.
func TestReorderTear(t *testing.T) {
	t.Parallel()
	torn := 0
	for seed := range uint64(24) {
		got, rep, base := reorderRun(t, &forgetfs.CutOptions{Reorder: true, Tear: true, Rand: rand.New(rand.NewPCG(seed, 2))})
		all := append([]byte(nil), base...)
		for _, w := range reorderWrites {
			all = applyAt(all, w.off, w.b)
		}
		zeros := make([]byte, len(all))
		for off := 0; off < len(got); off += forgetfs.SectorSize {
			end := min(off+forgetfs.SectorSize, len(got))
			s := got[off:end]
			ok := s == string(all[off:end]) || s == string(zeros[off:end])
			if end <= len(base) {
				ok = ok || s == string(base[off:end]) || s == string(applyAt(append([]byte(nil), base...), reorderWrites[1].off, reorderWrites[1].b)[off:end])
			}
			if !ok {
				t.Fatalf("seed %d: sector at %d holds %q, neither synced nor written; report %+v", seed, off, s, rep)
			}
		}
		torn += rep.Torn
	}
	if torn == 0 {
		t.Fatal("24 seeds tore no write")
	}
}

// applyAt writes b into s at off, growing s as a file grows.
func applyAt(s []byte, off int64, b []byte) []byte {
	if end := off + int64(len(b)); end > int64(len(s)) {
		s = append(s, make([]byte, end-int64(len(s)))...)
	}
	copy(s[off:], b)
	return s
}
