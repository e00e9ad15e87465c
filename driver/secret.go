package driver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/google/uuid"
)

// IdempotencyKey is the Idempotency-Key header value for a deposit: a
// quoted Structured Field string holding the UUIDv5 (URL namespace) of
// "POST <target> <key>", or of the lowercase hex HMAC-SHA256 of that string
// under the key secret when one is set. The same inputs give the same bytes
// in every process and after every restart, so a retry, after a restart
// too, is the same request to the server.
func IdempotencyKey(target, key string, secret []byte) string {
	name := "POST " + target + " " + key
	if len(secret) > 0 {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(name))
		name = hex.EncodeToString(mac.Sum(nil))
	}
	return `"` + uuid.NewSHA1(uuid.NameSpaceURL, []byte(name)).String() + `"`
}

// SecretFingerprint identifies a key secret without revealing it, for
// [Driver.SecretFingerprint]: the store refuses a run whose secret differs
// from the one its keys were made with. It is "" when there is no secret.
func SecretFingerprint(secret []byte) string {
	if len(secret) == 0 {
		return ""
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("deposit key secret fingerprint"))
	return hex.EncodeToString(mac.Sum(nil))[:16]
}
