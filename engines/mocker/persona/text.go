package persona

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// fillerWords make up strings with no better source.
var fillerWords = []string{"alpha", "amber", "blue", "cedar", "delta", "ember", "field", "harbor",
	"island", "lumen", "maple", "north", "orbit", "pebble", "river", "summit", "tango", "violet"}

// namedValues are string values for properties whose name contains the key, so that
// arguments read like a model's (a "city" gets a city).
var namedValues = []struct {
	key    string
	values []string
}{
	{"email", []string{"alice@example.com", "bob@example.org"}},
	{"url", []string{"https://example.com/docs", "https://example.org/a"}},
	{"city", []string{"Paris", "Tokyo", "Lima", "Oslo", "Nairobi"}},
	{"location", []string{"Paris, France", "Tokyo, Japan", "Lima, Peru"}},
	{"country", []string{"France", "Japan", "Peru", "Kenya"}},
	{"date", []string{"2025-06-28", "2025-07-01"}},
	{"time", []string{"12:00", "09:30"}},
	{"path", []string{"/tmp/notes.txt", "src/main.go"}},
	{"file", []string{"notes.txt", "report.md"}},
	{"lang", []string{"en", "fr"}},
	{"query", []string{"weather today", "latest news", "opening hours"}},
	{"command", []string{"ls -la", "git status"}},
	{"cmd", []string{"ls -la", "git status"}},
	{"code", []string{"print(1 + 1)"}},
	{"unit", []string{"celsius", "metric"}},
	{"name", []string{"Alice", "Bob", "Carol"}},
	{"id", []string{"item-1", "item-42"}},
	{"text", []string{"hello world", "a short note"}},
	{"message", []string{"hello world", "a short note"}},
	{"title", []string{"Weekly report", "Notes"}},
	{"description", []string{"a short description"}},
}

// word returns a string value suited to the property being generated.
func (g *generator) word() string {
	name := strings.ToLower(g.name)
	for _, nv := range namedValues {
		if strings.Contains(name, nv.key) {
			return nv.values[g.r.intn(len(nv.values))]
		}
	}
	return fillerWords[g.r.intn(len(fillerWords))]
}

// words returns up to n words (runs of letters and digits, plus inner '.', '-' and '_'
// as in 21.5 or get_weather) of s, skipping the markup of chat formats (<|...|>,
// <｜...｜>, <tag>, [TAG]) so that quoting them is safe in any format.
func words(s string, n int) []string {
	var out []string
	for i := 0; i < len(s) && len(out) < n; {
		switch {
		case strings.HasPrefix(s[i:], "<|"), strings.HasPrefix(s[i:], "<｜"), s[i] == '<', s[i] == '[':
			closer := map[byte]string{'<': ">", '[': "]"}[s[i]]
			if strings.HasPrefix(s[i:], "<｜") {
				closer = "｜>"
			} else if strings.HasPrefix(s[i:], "<|") {
				closer = "|>"
			}
			if j := strings.Index(s[i+1:], closer); j >= 0 && j < 64 {
				i += 1 + j + len(closer)
				continue
			}
			i++
			continue
		}
		r, size := decodeRune(s[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		j := i
		for j < len(s) {
			r, size := decodeRune(s[j:])
			if isWordRune(r) || (r == '.' || r == '-' || r == '_') && j+size < len(s) && isWordStart(s[j+size:]) && j > i {
				j += size
				continue
			}
			break
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

func isWordStart(s string) bool {
	r, _ := decodeRune(s)
	return isWordRune(r)
}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }

// sentence joins words into text that reads as a short phrase ("" for none).
func sentence(ws []string) string { return strings.Join(ws, " ") }

// openers begin a plain answer; closers end one.
var (
	answerOpeners = []string{"Here is a short answer", "Sure", "Good question", "In short"}
	answerBodies  = []string{
		"the answer depends on a few details, but the usual choice works well",
		"this is the mock engine's reply, deterministic for this prompt and seed",
		"the simplest approach is usually the best one here",
		"there are two common options and either will do",
	}
	resultOpeners = []string{"Based on the tool result", "The tool returned", "According to the result"}
	thinkOpeners  = []string{"The user asks", "The question is", "Let me look at the request"}
)
