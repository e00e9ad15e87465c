package dedup

import (
	"fmt"
	"iter"
	"strconv"
	"time"
)

// Object is what a store holds of one object: a payload named by an
// identity, which keeps one record on the server while its content (its
// versions) changes. Key is the object key. The zero value is no object.
type Object struct {
	Target, Key string
	// Identifier is the record's identifier.
	Identifier string
	// Version is the content key of the version the server holds, as last
	// confirmed; Tag the server's tag of it (an ETag, a revision; "" when
	// unknown); Order its version-pointer value ("" without one);
	// AppliedAt when it was confirmed.
	Version, Tag, Order string
	AppliedAt           time.Time
	// Pending is the content key of an update whose intent was recorded
	// and whose outcome is unknown ("" when none), PendingOrder its order,
	// PendingSince when its intent was recorded.
	Pending, PendingOrder string
	PendingSince          time.Time
	// Updates counts the versions applied after the first; Stale the
	// lines refused as older than the version held.
	Updates, Stale int
	// CreatedAt and UpdatedAt are in UTC, with microsecond precision.
	CreatedAt, UpdatedAt time.Time
}

// Version is one version an object was given: done once the server
// confirmed it, failed with the server's terminal answer.
type Version struct {
	Version string // the content key
	State   State  // StateDone or StateFailed
	Order   string
	Status  int
	Problem string
	At      time.Time
}

// Applied is a version the server confirmed, for ApplyVersion.
type Applied struct {
	Version string // content key; required
	Tag     string // the server's tag of it, "" if unknown
	Order   string
	// Identifier is the record's; required for an object not stored yet,
	// kept as it is otherwise when "".
	Identifier string
}

// ObjectCounts counts a target's objects and their versions.
type ObjectCounts struct {
	Objects  int // objects with a row
	Versions int // versions applied, the first ones included
	Updates  int // versions applied after the first
	Pending  int // objects with an update in flight
	Failed   int // versions refused for good
	Stale    int // lines refused as older than the version held
}

func checkObject(target, key, version string) error {
	if err := checkKey(target, key); err != nil {
		return err
	}
	if version == "" {
		return fmt.Errorf("%w: object %s: empty version", ErrInvalidArgument, key)
	}
	return nil
}

// objectPage is how many objects ListObjects reads per query.
const objectPage = 500

// objectPageSize is objectPage for a query's LIMIT.
var objectPageSize = strconv.Itoa(objectPage)

// listObjects yields the objects that page reads, objectPage at a time,
// each page after the target and key of the last one, holding no
// transaction open between pages; closed tells a closed store.
func listObjects(closed func() bool, page func(afterTarget, afterKey string) ([]Object, error)) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		afterTarget, afterKey := "", ""
		for {
			if closed() {
				yield(Object{}, ErrClosed)
				return
			}
			objs, err := page(afterTarget, afterKey)
			if err != nil {
				yield(Object{}, fmt.Errorf("dedup: list objects: %w", err))
				return
			}
			for _, o := range objs {
				if !yield(o, nil) {
					return
				}
			}
			if len(objs) < objectPage {
				return
			}
			afterTarget, afterKey = objs[len(objs)-1].Target, objs[len(objs)-1].Key
		}
	}
}
