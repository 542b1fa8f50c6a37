package redisstream

import "sync/atomic"

// Stats counts what the backend handled on its own since it was created.
type Stats struct {
	// Trimmed is the number of pending entries found deleted from their
	// stream before they were settled (lost; acked and reported).
	Trimmed int64
	// Malformed is the number of entries that could not be decoded
	// (dead-lettered or dropped, acked and reported).
	Malformed int64
	// GroupsRecreated counts consumer groups re-created after NOGROUP.
	GroupsRecreated int64
	// Recovered is the number of entries a subscription took back from
	// its own pending list after a read whose reply was lost (see
	// "Delivery semantics" in the package doc).
	Recovered int64
}

type stats struct {
	trimmed, malformed, recreated, recovered atomic.Int64
}

// Stats returns the backend's counters.
func (b *Backend) Stats() Stats {
	return Stats{
		Trimmed:         b.stats.trimmed.Load(),
		Malformed:       b.stats.malformed.Load(),
		GroupsRecreated: b.stats.recreated.Load(),
		Recovered:       b.stats.recovered.Load(),
	}
}
