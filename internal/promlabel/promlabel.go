// Package promlabel writes Prometheus label values in the text exposition format.
package promlabel

import "strings"

// escaper is built once: a Replacer builds its tables on first use, which costs more
// than a replacement.
var escaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Escape is v as a label value between double quotes: backslash, double quote and line
// feed escaped (the exposition format's three), anything else as it is.
func Escape(v string) string {
	if !strings.ContainsAny(v, "\\\"\n") {
		return v
	}
	return escaper.Replace(v)
}
