package bench

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// A load ramp (docs/reference.md §27.8) replays a trace's requests in a fixed time while
// the arrival rate follows a multiplier schedule: the trace's own arrival pattern (its
// bursts and lulls) is kept, and stretched or squeezed in time so that the rate at each
// moment is the trace's rate times the schedule's multiplier there.

// Bounds of a ramp.
const (
	// MaxRampPoints bounds the points of a schedule.
	MaxRampPoints = 1000
	// MaxRampMultiplier bounds each multiplier.
	MaxRampMultiplier = 1e6
	// MinRampDuration is the shortest ramp.
	MinRampDuration = time.Millisecond
)

// RampPoint is one point of a multiplier schedule: at At (from the start of the run) the
// arrival rate is Mult times the base rate.
type RampPoint struct {
	At   time.Duration
	Mult float64
}

// Ramp is a multiplier schedule over Duration: piecewise linear between its points,
// which start at 0 and end at Duration (At ascending), every multiplier from 0 to
// MaxRampMultiplier and not all 0.
type Ramp struct {
	Points   []RampPoint
	Duration time.Duration
}

// ParseRamp reads a schedule for a run of duration d: either multipliers alone, spaced
// evenly from 0 to d ("1,6,1": 1× at the start, 6× half way, 1× at the end; one value:
// that multiplier throughout), or TIME:MULT points with Go durations ("0s:1,4m:6,6m:6,10m:1"),
// the first at 0 and the last at d. Errors name the point that is wrong.
func ParseRamp(spec string, d time.Duration) (Ramp, error) {
	if d < MinRampDuration || d > MaxArrival {
		return Ramp{}, fmt.Errorf("bench: ramp duration %v: want %v to %v", d, MinRampDuration, MaxArrival)
	}
	parts := strings.Split(spec, ",")
	if strings.TrimSpace(spec) == "" || len(parts) > MaxRampPoints {
		return Ramp{}, fmt.Errorf("bench: ramp %q: want 1 to %d comma-separated multipliers (e.g. 1,6,1) or TIME:MULT points (e.g. 0s:1,5m:6,10m:1)", spec, MaxRampPoints)
	}
	timed := strings.Contains(spec, ":")
	r := Ramp{Duration: d, Points: make([]RampPoint, 0, max(len(parts), 2))}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		at, mult, hasAt := strings.Cut(p, ":")
		if hasAt != timed {
			return Ramp{}, fmt.Errorf("bench: ramp point %d %q: give every point as TIME:MULT, or none", i+1, p)
		}
		if !hasAt {
			mult, at = at, ""
		}
		m, err := strconv.ParseFloat(strings.TrimSpace(mult), 64)
		if err != nil {
			return Ramp{}, fmt.Errorf("bench: ramp point %d %q: multiplier %q: want a number", i+1, p, mult)
		}
		pt := RampPoint{Mult: m}
		if hasAt {
			if pt.At, err = time.ParseDuration(strings.TrimSpace(at)); err != nil {
				return Ramp{}, fmt.Errorf("bench: ramp point %d %q: time %q: want a duration such as 90s or 5m", i+1, p, at)
			}
		} else if len(parts) > 1 {
			pt.At = time.Duration(float64(d) * float64(i) / float64(len(parts)-1))
		}
		r.Points = append(r.Points, pt)
	}
	if len(r.Points) == 1 && !timed {
		r.Points = append(r.Points, RampPoint{At: d, Mult: r.Points[0].Mult})
	}
	if err := r.Validate(); err != nil {
		return Ramp{}, err
	}
	return r, nil
}

// Validate checks the schedule; errors name the point.
func (r Ramp) Validate() error {
	switch {
	case r.Duration < MinRampDuration || r.Duration > MaxArrival:
		return fmt.Errorf("bench: ramp duration %v: want %v to %v", r.Duration, MinRampDuration, MaxArrival)
	case len(r.Points) < 2 || len(r.Points) > MaxRampPoints:
		return fmt.Errorf("bench: ramp of %d points: want 2 to %d", len(r.Points), MaxRampPoints)
	case r.Points[0].At != 0:
		return fmt.Errorf("bench: ramp point 1 at %v: the first point must be at 0s", r.Points[0].At)
	case r.Points[len(r.Points)-1].At != r.Duration:
		return fmt.Errorf("bench: ramp point %d at %v: the last point must be at the ramp's duration, %v", len(r.Points), r.Points[len(r.Points)-1].At, r.Duration)
	}
	for i, p := range r.Points {
		if !(p.Mult >= 0 && p.Mult <= MaxRampMultiplier) {
			return fmt.Errorf("bench: ramp point %d: multiplier %v: want 0 to %g", i+1, p.Mult, float64(MaxRampMultiplier))
		}
		if i > 0 && p.At <= r.Points[i-1].At {
			return fmt.Errorf("bench: ramp point %d at %v: not after point %d at %v (want times ascending)", i+1, p.At, i, r.Points[i-1].At)
		}
	}
	if !(r.Area() > 0) {
		return errors.New("bench: ramp: every multiplier is 0 (no request could arrive)")
	}
	return nil
}

// Mult is the multiplier at t (the first point's before 0, the last one's after Duration).
func (r Ramp) Mult(t time.Duration) float64 {
	ps := r.Points
	if t <= ps[0].At {
		return ps[0].Mult
	}
	for k := 1; k < len(ps); k++ {
		if t <= ps[k].At {
			a, b := ps[k-1], ps[k]
			return a.Mult + (b.Mult-a.Mult)*float64(t-a.At)/float64(b.At-a.At)
		}
	}
	return ps[len(ps)-1].Mult
}

// Area is the integral of the multiplier over the ramp, in seconds (a ramp at 1×
// throughout has its duration's seconds): the ramp sends Area × base rate requests.
func (r Ramp) Area() float64 {
	var a float64
	for k := 1; k < len(r.Points); k++ {
		p, q := r.Points[k-1], r.Points[k]
		a += (p.Mult + q.Mult) / 2 * (q.At - p.At).Seconds()
	}
	return a
}

// at is the time at which the integral of the multiplier from 0 reaches y seconds
// (0 ≤ y ≤ Area): the inverse of the cumulative multiplier, solved per linear segment.
func (r Ramp) at(y float64) time.Duration {
	for k := 1; k < len(r.Points); k++ {
		p, q := r.Points[k-1], r.Points[k]
		w := (q.At - p.At).Seconds()
		seg := (p.Mult + q.Mult) / 2 * w
		if y > seg && k < len(r.Points)-1 {
			y -= seg
			continue
		}
		y = min(max(y, 0), seg)
		// m(x) = m0 + s·x on [0, w]; solve m0·x + s·x²/2 = y for x.
		m0, s := p.Mult, (q.Mult-p.Mult)/w
		var x float64
		if y > 0 {
			// The root of s/2·x² + m0·x − y = 0 in [0, w], written so that it holds for
			// s = 0 too and loses no precision when s·y is small against m0².
			x = 2 * y / (m0 + math.Sqrt(math.Max(m0*m0+2*s*y, 0)))
		}
		x = min(max(x, 0), w)
		return p.At + time.Duration(x*float64(time.Second))
	}
	return r.Duration
}

// Apply warps the arrivals of trace (in arrival order, as the trace readers return them)
// so that they follow the ramp and returns the warped copies. rate is the arrival rate at
// 1× in requests/s: the ramp then takes the trace's first round(rate × Area) requests;
// rate 0 takes them all (the base rate is then len(trace) / Area). Each request keeps its
// lengths, hash ids and adapter; its position in the trace's time, as a fraction of the
// span taken (one mean gap added after the last, so that it does not land on the ramp's
// very end), becomes the time at which the ramp's cumulative multiplier reaches that
// fraction of its area: the trace's bursts stay, and the rate at t is proportional to
// Mult(t). Errors: an invalid ramp, a rate that is negative or not finite, arrivals out
// of order, or a trace with fewer requests than the rate needs (the error says how many
// it has and needs).
func (r Ramp) Apply(trace []Request, rate float64) ([]Request, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	area := r.Area()
	n := len(trace)
	switch {
	case !(rate >= 0) || math.IsInf(rate, 0):
		return nil, fmt.Errorf("bench: ramp rate %v requests/s: want a number >= 0 (0: every request of the trace)", rate)
	case rate > 0:
		want := math.Round(rate * area)
		if want > float64(n) {
			return nil, fmt.Errorf("bench: ramp at %g requests/s at 1× over %v (a mean multiplier of %.3g) needs %.0f requests; the trace has %d: lower the rate or shorten the ramp",
				rate, r.Duration, area/r.Duration.Seconds(), want, n)
		}
		n = int(want)
	}
	if n == 0 {
		return nil, errors.New("bench: ramp: no request to send (an empty trace, or a rate that rounds to none)")
	}
	for i := 1; i < n; i++ {
		if trace[i].Arrival < trace[i-1].Arrival {
			return nil, fmt.Errorf("bench: ramp: request %d arrives before request %d: want the trace in arrival order", i, i-1)
		}
	}
	first := trace[0].Arrival
	span := float64(trace[n-1].Arrival - first)
	if n > 1 {
		span *= float64(n) / float64(n-1)
	}
	out := make([]Request, n)
	for i := range out {
		out[i] = trace[i]
		u := float64(i) / float64(n) // a trace whose requests all arrive at once: evenly
		if span > 0 {
			u = float64(trace[i].Arrival-first) / span
		}
		out[i].Arrival = r.at(u * area)
	}
	return out, nil
}

// String writes the schedule as TIME:MULT points.
func (r Ramp) String() string {
	parts := make([]string, len(r.Points))
	for i, p := range r.Points {
		parts[i] = p.At.String() + ":" + strconv.FormatFloat(p.Mult, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}
