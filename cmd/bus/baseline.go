package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/eventbus-go/bus/internal/median"
	"github.com/eventbus-go/bus/internal/urlopt"
)

// Raw clients of --baseline, by URL scheme.
var rawClients = map[string]openTarget{
	"mem":        openChanTarget,
	"redis":      openRedisTarget,
	"rediss":     openRedisTarget,
	"nats":       openNATSTarget,
	"tls":        openNATSTarget,
	"nats+tls":   openNATSTarget,
	"postgres":   openPGTarget,
	"postgresql": openPGTarget,
	"amqp":       openAMQPTarget,
	"amqps":      openAMQPTarget,
	"kafka":      openKafkaTarget,
	"sqs":        openSQSTarget,
}

// checkBaselineURL reports, without I/O, whether --baseline has a raw
// client for rawURL.
func checkBaselineURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("--baseline: %w", urlopt.ParseError(rawURL))
	}
	if _, ok := rawClients[u.Scheme]; !ok {
		return fmt.Errorf("--baseline: no raw client for %q URLs (it has one for mem, redis, rediss, nats, tls, nats+tls, postgres, postgresql, amqp, amqps, kafka and sqs)", u.Scheme)
	}
	return nil
}

// openRawTarget opens the raw client for the run's URL.
func openRawTarget(ctx context.Context, r *benchRun) (target, error) {
	if err := checkBaselineURL(r.cfg.URL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(r.cfg.URL)
	return rawClients[u.Scheme](ctx, r)
}

// comparison is the outcome of a baseline run: the bus and the raw client
// over the same settings, in alternating order.
type comparison struct {
	Bus, Raw benchResult // medians over the rounds (see aggregate)
	Ratio    ratios      // medians of the rounds' ratios
	Rounds   int         // rounds carried out
}

// ratios are bus/raw figures; a latency ratio is 0 when either side
// measured no latency.
type ratios struct {
	Throughput     float64
	P50, P99, P999 float64
	CPU            float64 // CPU per message, bus over raw; 0 when unknown
}

func ratioOf(b, raw benchResult) ratios {
	var r ratios
	if raw.MsgsPerSec > 0 {
		r.Throughput = b.MsgsPerSec / raw.MsgsPerSec
	}
	if b.CPUPerMsg > 0 && raw.CPUPerMsg > 0 {
		r.CPU = float64(b.CPUPerMsg) / float64(raw.CPUPerMsg)
	}
	if b.Latency != "" && raw.Latency != "" {
		div := func(x, y time.Duration) float64 {
			if y <= 0 {
				return 0
			}
			return float64(x) / float64(y)
		}
		r.P50, r.P99, r.P999 = div(b.P50, raw.P50), div(b.P99, raw.P99), div(b.P999, raw.P999)
	}
	return r
}

// runComparison runs cfg.rounds() rounds of the raw client and the bus,
// raw first in odd rounds and bus first in even ones, so neither side
// always runs on a warmer (or more fragmented) process. It stops at the
// first round in which a side could not run or failed.
func runComparison(ctx context.Context, cfg benchConfig, progress func(string)) (comparison, error) {
	if err := cfg.validate(); err != nil {
		return comparison{}, err
	}
	type side struct {
		open  openTarget
		label string
		out   *[]benchResult
	}
	var buses, raws []benchResult
	var rs []ratios
	var c comparison
	var runErr error
rounds:
	for i := range cfg.rounds() {
		order := []side{{rawOpener(cfg), "raw ", &raws}, {busOpener(cfg), "bus ", &buses}}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, s := range order {
			res, err := runSide(ctx, cfg, s.open, s.label, progress)
			if err != nil {
				runErr = fmt.Errorf("%s, round %d: %w", s.label[:len(s.label)-1], i+1, err)
			}
			if res.Seconds > 0 {
				*s.out = append(*s.out, res)
			}
			if err != nil || res.failure() != nil {
				break rounds
			}
		}
		if len(buses) != i+1 || len(raws) != i+1 {
			break
		}
		rs = append(rs, ratioOf(buses[i], raws[i]))
		c.Rounds++
	}
	c.Bus, c.Raw = aggregate(buses), aggregate(raws)
	c.Ratio = ratios{
		Throughput: median.Of(rs, func(r ratios) float64 { return r.Throughput }),
		P50:        median.Of(rs, func(r ratios) float64 { return r.P50 }),
		P99:        median.Of(rs, func(r ratios) float64 { return r.P99 }),
		P999:       median.Of(rs, func(r ratios) float64 { return r.P999 }),
		CPU:        median.Of(rs, func(r ratios) float64 { return r.CPU }),
	}
	return c, runErr
}

// aggregate folds the rounds of one side: timings, rates and latency
// quantiles are medians, the maximum latency and the peak heap are the
// largest, and the delivery counts are those of the worst round (most
// lost, then most duplicates), so a loss in any round shows.
func aggregate(rs []benchResult) benchResult {
	if len(rs) <= 1 {
		if len(rs) == 0 {
			return benchResult{}
		}
		return rs[0]
	}
	worst := slices.MaxFunc(rs, func(a, b benchResult) int {
		return cmp.Or(cmp.Compare(a.Lost, b.Lost), cmp.Compare(a.Duplicates, b.Duplicates))
	})
	out := worst
	out.Seconds = median.Of(rs, func(r benchResult) float64 { return r.Seconds })
	out.MsgsPerSec = median.Of(rs, func(r benchResult) float64 { return r.MsgsPerSec })
	out.AchievedRate = median.Of(rs, func(r benchResult) float64 { return r.AchievedRate })
	dur := func(f func(benchResult) time.Duration) time.Duration {
		return time.Duration(median.Of(rs, func(r benchResult) float64 { return float64(f(r)) }))
	}
	out.P50 = dur(func(r benchResult) time.Duration { return r.P50 })
	out.P99 = dur(func(r benchResult) time.Duration { return r.P99 })
	out.P999 = dur(func(r benchResult) time.Duration { return r.P999 })
	out.SendLateP50 = dur(func(r benchResult) time.Duration { return r.SendLateP50 })
	out.SendLateP99 = dur(func(r benchResult) time.Duration { return r.SendLateP99 })
	out.CPUPerMsg = dur(func(r benchResult) time.Duration { return r.CPUPerMsg })
	out.Errors = 0
	for _, r := range rs {
		out.Max = max(out.Max, r.Max)
		out.PeakHeapMiB = max(out.PeakHeapMiB, r.PeakHeapMiB)
		out.TimedOut = out.TimedOut || r.TimedOut
		out.RateShort = out.RateShort || r.RateShort
		out.Errors += r.Errors
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
	}
	return out
}
