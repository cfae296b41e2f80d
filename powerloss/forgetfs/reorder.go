package forgetfs

import (
	"math/rand/v2"
	"os"
)

// reorderFile is a cut with CutOptions.Reorder for the file at path and
// its unsynced writes l: the file goes back to its synced content, then
// each write or truncation of l is lost or kept on its own (with tear, a
// write that spans a sector boundary may keep any subset of its sectors),
// and the kept ones are put down again in a random order.
func (f *FS) reorderFile(path string, l undos, tear bool, rng *rand.Rand) error {
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer file.Close()
	f.report.Files++
	for i := len(l) - 1; i >= 0; i-- {
		if err := putBack(file, l[i], 0); err != nil {
			return err
		}
	}
	var order []int // indices of l kept, in the order they land
	for i, u := range l {
		if rng.IntN(2) == 0 {
			f.report.Writes++
			f.report.Bytes += u.n
			continue
		}
		order = append(order, i)
	}
	rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	landed := make([]bool, len(l))
	for _, i := range order {
		u := l[i]
		for j := range i {
			if !landed[j] {
				f.report.Reordered++
				break
			}
		}
		landed[i] = true
		if err := putDown(file, u, tear, rng, &f.report); err != nil {
			return err
		}
	}
	return nil
}

// putDown does one kept write or truncation again: a write whole, or with
// tear maybe only some of its sectors.
func putDown(file *os.File, u undo, tear bool, rng *rand.Rand, rep *Report) error {
	switch {
	case u.trunc:
		rep.Kept++
		return file.Truncate(u.off)
	case u.n == 0: // an allocation: the writes after it make the size
		rep.Kept++
		return nil
	}
	pieces := sectors(u.off, u.n)
	keep := make([]bool, len(pieces))
	kept := 0
	for k := range keep {
		keep[k] = !tear || len(pieces) == 1 || rng.IntN(2) == 0
		if keep[k] {
			kept++
		}
	}
	switch kept {
	case 0:
		rep.Writes++
		rep.Bytes += u.n
		return nil
	case len(pieces):
		rep.Kept++
	default:
		rep.Torn++
	}
	for k, p := range pieces {
		if !keep[k] {
			continue
		}
		if _, err := file.WriteAt(u.data[p[0]:p[1]], u.off+p[0]); err != nil {
			return err
		}
	}
	return nil
}

// sectors splits a write of n bytes at off at the SectorSize boundaries
// inside it: the [from, to) offsets of its pieces, relative to off.
func sectors(off, n int64) [][2]int64 {
	var pieces [][2]int64
	from := int64(0)
	for b := (off/SectorSize + 1) * SectorSize; b < off+n; b += SectorSize {
		pieces = append(pieces, [2]int64{from, b - off})
		from = b - off
	}
	return append(pieces, [2]int64{from, n})
}
