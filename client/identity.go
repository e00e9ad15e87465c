package client

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/jsonpointer"
)

// identity names objects: the JSON Pointers whose values name a payload's
// object (Config.Identity), and the one that orders its versions
// (Config.VersionPointer). The zero identity names none.
type identity struct {
	pointers []string
	version  string
}

// newIdentity checks the pointers of cfg.
func newIdentity(pointers []string, version string) (identity, error) {
	for _, p := range pointers {
		if p == "" {
			return identity{}, fmt.Errorf("%w: an identity pointer is empty (the whole payload cannot name an object)", ErrConfig)
		}
		if _, err := jsonpointer.Parse(p); err != nil {
			return identity{}, fmt.Errorf("%w: identity pointer %q: %v", ErrConfig, p, err)
		}
	}
	if _, err := jsonpointer.Parse(version); version != "" && err != nil {
		return identity{}, fmt.Errorf("%w: version pointer %q: %v", ErrConfig, version, err)
	}
	if version != "" && len(pointers) == 0 {
		return identity{}, fmt.Errorf("%w: Config.VersionPointer orders the versions of an object: it needs Config.Identity", ErrConfig)
	}
	return identity{pointers: pointers, version: version}, nil
}

// dataset is the identity as a dataset's keyed document reads it: its
// pointers name values of the dataset's metadata, which the document
// holds under "metadata", as the keyer's ignore pointers do.
func (id identity) dataset() identity {
	out := identity{pointers: make([]string, len(id.pointers))}
	for i, p := range id.pointers {
		out.pointers[i] = "/metadata" + p
	}
	if id.version != "" {
		out.version = "/metadata" + id.version
	}
	return out
}

// identityOf is cfg's identity, or the one of a target whose payloads
// name their objects (driver.Identified), which takes no other. The
// target's own is not a setting of the store's: it never changes.
func identityOf(cfg Config, drv driver.Driver) (identity, error) {
	own, ok := drv.(driver.Identified)
	if !ok {
		return newIdentity(cfg.Identity, cfg.VersionPointer)
	}
	pointers, version := own.Identity()
	if len(cfg.Identity) > 0 && !slices.Equal(cfg.Identity, pointers) || cfg.VersionPointer != "" && cfg.VersionPointer != version {
		return identity{}, fmt.Errorf("%w: the target %s names its objects itself (%s, versions by %s): it takes no other identity or version pointer",
			ErrConfig, drv.Name(), strings.Join(pointers, " "), version)
	}
	return newIdentity(pointers, version)
}

// on reports whether payloads name objects.
func (id identity) on() bool { return len(id.pointers) > 0 }

// name sets k.Object, the object key of the payload k, and k.Order, its
// version's order: the values at the identity pointers of its canonical
// body, each a non-empty string or an integer. A payload without one of
// them names no object: an error naming the pointer.
func (id identity) name(k *canonical.Keyed) error {
	if !id.on() {
		return nil
	}
	values := make([]string, len(id.pointers))
	for i, p := range id.pointers {
		v, err := valueAt(k.Body, p)
		if err != nil {
			return fmt.Errorf("identity %s: %w", p, err)
		}
		values[i] = v
	}
	k.Object = objectKey(values)
	if id.version == "" {
		return nil
	}
	v, err := valueAt(k.Body, id.version)
	if err != nil {
		return fmt.Errorf("version pointer %s: %w", id.version, err)
	}
	if k.Order, err = versionOrder(v); err != nil {
		return fmt.Errorf("version pointer %s: %w", id.version, err)
	}
	return nil
}

// valueAt is the string or integer at pointer p of the canonical body.
func valueAt(body []byte, p string) (string, error) {
	v, ok, err := canonical.IDAt(body, []string{p})
	switch {
	case errors.Is(err, canonical.ErrInexactNumber):
		return "", errors.New("names a number that is not an integer of at most 15 digits; give it as a string")
	case err != nil:
		return "", err
	case !ok:
		return "", errors.New("names no string or integer in this payload")
	}
	return v, nil
}

// objectKey is the lowercase hex SHA-256 of the canonical JSON array of
// the identity values (each a string), so that any language can compute
// it: ["10.5072/reef-2025"] for one pointer.
func objectKey(values []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jcsString(v))
	}
	b.WriteByte(']')
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// jcsString is s as RFC 8785 writes a string: only the quote, the
// backslash and the control characters escaped, the short escapes where
// JSON has them.
func jcsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// versionOrder is the text that orders a version: "n:" and the integer,
// or "t:" and the RFC 3339 time in UTC.
func versionOrder(v string) (string, error) {
	if n, ok := new(big.Int).SetString(v, 10); ok {
		return "n:" + n.String(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return "", fmt.Errorf("names %q, which is neither an integer nor an RFC 3339 time", v)
	}
	return "t:" + t.UTC().Format(time.RFC3339Nano), nil
}

// compareOrders compares two orders of versionOrder: -1, 0 or +1, and ok
// false when they are of different kinds (a number and a time).
func compareOrders(a, b string) (int, bool) {
	if len(a) < 2 || len(b) < 2 || a[:2] != b[:2] {
		return 0, false
	}
	switch a[:2] {
	case "n:":
		x, okx := new(big.Int).SetString(a[2:], 10)
		y, oky := new(big.Int).SetString(b[2:], 10)
		if !okx || !oky {
			return 0, false
		}
		return x.Cmp(y), true
	case "t:":
		x, errx := time.Parse(time.RFC3339Nano, a[2:])
		y, erry := time.Parse(time.RFC3339Nano, b[2:])
		if errx != nil || erry != nil {
			return 0, false
		}
		return x.Compare(y), true
	}
	return 0, false
}

// orderText is an order as the payload gave it, for a message.
func orderText(o string) string {
	if len(o) > 2 {
		return o[2:]
	}
	return o
}

// Identify sets k.Object and k.Order as a Client with Config.Identity
// identity and Config.VersionPointer versionPointer does, for a tool that
// prints keys: the object key of the payload k (as KeyPayload returned
// it) and its version's order. An error names a pointer that is malformed
// or that the payload lacks.
func Identify(k *canonical.Keyed, identity []string, versionPointer string) error {
	id, err := newIdentity(identity, versionPointer)
	if err != nil {
		return err
	}
	return id.name(k)
}

// updateKey is the deposit key of the steps that apply version (a content
// key) to object as its nth update: the same for every attempt of that
// update, after a restart too, and another for the same version applied
// again later (an allowed revert).
func updateKey(object string, nth int, version string) string {
	sum := sha256.Sum256([]byte("update\x00" + object + "\x00" + strconv.Itoa(nth) + "\x00" + version))
	return hex.EncodeToString(sum[:])
}
