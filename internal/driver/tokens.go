package driver

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// NewToken returns a fresh lock token: 128 bits from crypto/rand as 32
// lowercase hex digits, the form every engine hands out.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read)
	return hex.EncodeToString(b[:])
}

// IsToken reports whether t has the form of a lock token: 32 lowercase hex
// digits. Receipts keep tokens decoded, so only a token of this form can
// name a delivery a receipt records.
func IsToken(t string) bool {
	if len(t) != 32 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ContentKeyLen is how many bytes of the body's SHA-256 the content key
// keeps: 128 bits, so that two different bodies meet by chance with odds of
// about n²/2¹²⁹ among n live keys of a queue (never, in practice), at half
// the size of the whole hash in every dedup row and its index.
const ContentKeyLen = 16

// ContentKey is the content key of a body: what tells two bodies apart
// under one MessageID, and the dedup key of a message without one on a
// queue that deduplicates bodies.
func ContentKey(body []byte) []byte {
	sum := sha256.Sum256(body)
	return sum[:ContentKeyLen]
}

// ReceiptArgs encodes the arguments of s that change what the settlement
// does: the part of a receipt's key beside the delivery and the operation.
func ReceiptArgs(s Settlement) string {
	switch s.Op {
	case OpAbandon:
		if s.LastError != "" {
			return strconv.FormatInt(s.DelayMS, 10) + " " + strconv.Quote(s.LastError)
		}
		return strconv.FormatInt(s.DelayMS, 10)
	case OpReject:
		return strconv.Quote(s.Reason) + " " + strconv.Quote(s.Description)
	}
	return ""
}
