package conformance

import "github.com/eventbus-go/bus/backend"

// capability names one Capabilities flag a case depends on.
type capability int

const (
	capGroups capability = iota
	capRedelivery
	capNackDelay
	capOrdered
	capStartOldest
	capExtend
	capPublishDedup
	capScheduling
	capBroadcast
	capResults
)

func (c capability) String() string {
	switch c {
	case capGroups:
		return "ConsumerGroups"
	case capRedelivery:
		return "Redelivery"
	case capNackDelay:
		return "NackDelay"
	case capOrdered:
		return "Ordered"
	case capStartOldest:
		return "StartOldest"
	case capExtend:
		return "Extend"
	case capPublishDedup:
		return "PublishDedup"
	case capScheduling:
		return "Scheduling"
	case capBroadcast:
		return "Broadcast"
	case capResults:
		return "Results"
	}
	return "unknown"
}

func (c capability) in(caps backend.Capabilities) bool {
	switch c {
	case capGroups:
		return caps.ConsumerGroups
	case capRedelivery:
		return caps.Redelivery
	case capNackDelay:
		return caps.NackDelay
	case capOrdered:
		return caps.Ordered
	case capStartOldest:
		return caps.StartOldest
	case capExtend:
		return caps.Extend
	case capPublishDedup:
		return caps.PublishDedup
	case capScheduling:
		return caps.Scheduling
	case capBroadcast:
		return caps.Broadcast
	case capResults:
		return caps.Results
	}
	return false
}

// missingCaps returns the capabilities in needs that caps lacks.
func missingCaps(caps backend.Capabilities, needs []capability) []capability {
	var missing []capability
	for _, c := range needs {
		if !c.in(caps) {
			missing = append(missing, c)
		}
	}
	return missing
}
