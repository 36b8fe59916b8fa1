package coord

import "time"

// Member is one live Governor of a lane, as the shared record lists it.
type Member struct {
	Instance string
	Demand   int // calls in flight + queued at its last sync
	InFlight int // calls in flight at its last sync
	// Synced is its last sync (zero: it did not say).
	Synced time.Time
	// Parked: it holds no share and syncs before it dispatches again.
	Parked bool
}

// Shares splits limit among members by water-filling: a member that needs
// less than an equal share gets what it needs, and what is left is split
// equally among the others. When everyone's needs are met, the spare is
// split equally among all members, so that a burst can start anywhere.
// Integer remainders go one each to members in order, starting at index
// first mod len(members): every Governor computes the same shares from the
// same list, and they sum to limit (for limit >= 0).
//
// members must be in the same order for every Governor (Sync sorts them by
// instance id); the result is in that order.
func Shares(limit int, members []Member, first int) []int {
	n := len(members)
	shares := make([]int, n)
	if n == 0 || limit <= 0 {
		return shares
	}
	open := make([]bool, n)
	nOpen := n
	for i := range open {
		open[i] = true
	}
	rest := limit
	for nOpen > 0 {
		eq := rest / nOpen
		met := false
		for i, m := range members {
			if open[i] && max(m.Demand, 0) <= eq {
				shares[i] = max(m.Demand, 0)
				rest -= shares[i]
				open[i] = false
				nOpen--
				met = true
			}
		}
		if !met {
			break
		}
	}
	// Split what is left among the members still open, or among all when
	// every need is met.
	take := open
	if nOpen == 0 {
		take = nil
		nOpen = n
	}
	eq, rem := rest/nOpen, rest%nOpen
	start := ((first % n) + n) % n
	for k := range n {
		i := (start + k) % n
		if take != nil && !take[i] {
			continue
		}
		shares[i] += eq
		if rem > 0 {
			shares[i]++
			rem--
		}
	}
	return shares
}
