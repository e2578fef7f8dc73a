package pipe

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
)

// Authentication is an HMAC-SHA256 challenge-response over the two peers'
// random nonces: the receiver's hello carries its nonce, the sender answers
// with its own nonce and a MAC over both, and the receiver's welcome proves
// it holds the key too. The key itself never crosses the wire.

// Domain-separation labels, so that one side's proof can never be replayed
// as the other's.
const (
	senderLabel   = "rdmapipe v1 sender proof"
	receiverLabel = "rdmapipe v1 receiver proof"
)

// newNonce returns a fresh random nonce.
func newNonce() ([nonceLen]byte, error) {
	var n [nonceLen]byte
	_, err := rand.Read(n[:])
	return n, err
}

// proof returns the MAC a peer computes with key over its label and the
// nonces in the order (challenger's, responder's).
func proof(key []byte, label string, first, second []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(first)
	m.Write(second)
	return m.Sum(nil)
}

// validProof reports, in constant time, whether mac is the expected proof.
func validProof(key []byte, label string, first, second, mac []byte) bool {
	return hmac.Equal(proof(key, label, first, second), mac)
}
