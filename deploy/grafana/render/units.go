package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// formatValue writes v in a Grafana unit: "s" (seconds, shown in µs, ms, s or min),
// "percentunit" (a fraction shown as %), "bytes" and "Bps" (binary prefixes), "reqps"
// and "short" (SI prefixes). Anything else is "short".
func formatValue(unit string, v float64) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	switch unit {
	case "s":
		a := math.Abs(v)
		switch {
		case a == 0:
			return "0 s"
		case a < 1e-3:
			return trim(v*1e6) + " µs"
		case a < 1:
			return trim(v*1e3) + " ms"
		case a < 60:
			return trim(v) + " s"
		default:
			return trim(v/60) + " min"
		}
	case "percentunit":
		return trim(v*100) + "%"
	case "bytes":
		return binary(v) + "B"
	case "Bps":
		return binary(v) + "B/s"
	case "reqps":
		return si(v) + " req/s"
	default:
		return si(v)
	}
}

// trim writes v with three significant digits at most, without trailing zeros.
func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', decimals(v), 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func decimals(v float64) int {
	a := math.Abs(v)
	switch {
	case a >= 100 || a == 0:
		return 0
	case a >= 10:
		return 1
	default:
		return 2
	}
}

func si(v float64) string {
	a := math.Abs(v)
	for _, p := range []struct {
		f float64
		s string
	}{{1e12, " T"}, {1e9, " G"}, {1e6, " M"}, {1e3, " K"}} {
		if a >= p.f {
			return trim(v/p.f) + p.s
		}
	}
	return trim(v)
}

func binary(v float64) string {
	a := math.Abs(v)
	for _, p := range []struct {
		f float64
		s string
	}{{1 << 40, " Ti"}, {1 << 30, " Gi"}, {1 << 20, " Mi"}, {1 << 10, " Ki"}} {
		if a >= p.f {
			return trim(v/p.f) + p.s
		}
	}
	return fmt.Sprintf("%s ", trim(v))
}
