package model

import (
	"math/rand"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/dlclark/regexp2"
)

func splitAll(s pieceSplitter, text string) []string {
	var out []string
	s.split(text, func(p string) { out = append(out, p) })
	return out
}

// splitterTexts are texts that exercise every alternative of the GPT-style patterns.
var splitterTexts = []string{
	"", "a", " ", "\n", "I'm you're he'll we'd it's THEY'RE she'S 'LL 'x ''s",
	"hello  world\t\tfoo \n\n  bar\r\n\r\nbaz   ", "12345 1234567 ²³ ٣٤٥ Ⅻ",
	" !!! ?? ... --- a!b !\n\n!\r\n", "\ttab\u00a0nbsp\u3000ideo\u2028ls\u0085nel\v\f",
	"你好，世界！😀👍🏽 e\u0301", "x\xff\xfey \xe4\xb8", "   ", "a   ", "\n \n x", " \u00a0x",
	"'", "'s", " 's", "\n's", "ſ K İ 'ſ 'K",
	"HelloWorld HELLOworld HELLO ǅungla ʰmod 你好World a\u0301B Ab'S x'LL The'sE \u0301\u0301x 'a/\n/ 1/2",
	"ÀÉÎõü ǈǋ ᾈᾼ Ⅷⅷ ㄱㄴ ß\u0345 \u20dd\u20dd A\u20ddb",
}

// TestGPTSplitterMatchesRegexp2 compares the hand-written splitter with regexp2 running
// the same pattern, on crafted and random texts.
func TestGPTSplitterMatchesRegexp2(t *testing.T) {
	r := rand.New(rand.NewSource(17))
	texts := slices.Clone(splitterTexts)
	for _, name := range realModels {
		for _, c := range loadGolden(t, name).Encode {
			texts = append(texts, c.Text)
		}
	}
	extra := []rune("'sStTrReEvVmMlLdD \t\n\r\v\f\u0085\u00a0\u2028!?.-/1²٣ⅫAZaǅʰ你\u0301\u20dd")
	for range 1500 {
		var sb strings.Builder
		for range r.Intn(40) {
			if r.Intn(2) == 0 {
				sb.WriteRune(extra[r.Intn(len(extra))])
			} else {
				sb.WriteString(randomText(r, 1))
			}
		}
		texts = append(texts, sb.String())
	}
	for _, pattern := range []string{cl100kPattern, qwen2Pattern, o200kPattern} {
		fast, err := newSplitter(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if _, isRegex := fast.(regexSplitter); isRegex {
			t.Fatalf("pattern %q has no hand-written splitter", pattern)
		}
		ref := regexSplitter{re: regexp2.MustCompile(pattern, regexp2.None)}
		for _, text := range texts {
			if got, want := splitAll(fast, text), splitAll(ref, text); !slices.Equal(got, want) {
				t.Fatalf("pattern %q, text %q:\n got %q\nwant %q", pattern, text, got, want)
			}
		}
	}
}

// TestCharacterClasses checks the classes the hand-written splitters use against
// regexp2's \s, \p{L}, \p{N} and o200k's case classes, for every character below U+3000
// and a sample of the rest.
func TestCharacterClasses(t *testing.T) {
	re := regexp2.MustCompile(`^(?:(\s)|(\p{L})|(\p{N}))$`, regexp2.None)
	upper := regexp2.MustCompile(`^[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]$`, regexp2.None)
	lower := regexp2.MustCompile(`^[\p{Ll}\p{Lm}\p{Lo}\p{M}]$`, regexp2.None)
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r > 0x3000 {
			r += 11 // a sample above the alphabetic scripts
		}
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		m, err := re.FindRunesMatch([]rune{r})
		if err != nil {
			t.Fatal(err)
		}
		var space, letter, number bool
		if m != nil {
			space = m.GroupByNumber(1).Length > 0
			letter = m.GroupByNumber(2).Length > 0
			number = m.GroupByNumber(3).Length > 0
		}
		if space != unicode.IsSpace(r) || letter != isLetter(r) || number != isNumber(r) || isOther(r) != (m == nil) {
			t.Fatalf("%U: regexp2 space %v letter %v number %v; splitter space %v letter %v number %v other %v",
				r, space, letter, number, unicode.IsSpace(r), isLetter(r), isNumber(r), isOther(r))
		}
		if r%7 == 0 || r < 0x800 {
			if got, want := isUpperClass(r), matches(t, upper, r); got != want {
				t.Fatalf("%U: isUpperClass %v, regexp2 %v", r, got, want)
			}
			if got, want := isLowerClass(r), matches(t, lower, r); got != want {
				t.Fatalf("%U: isLowerClass %v, regexp2 %v", r, got, want)
			}
		}
	}
}

func matches(t *testing.T, re *regexp2.Regexp, r rune) bool {
	ok, err := re.MatchRunes([]rune{r})
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// FuzzGPTSplitter: the hand-written splitters and regexp2 agree on any text.
func FuzzGPTSplitter(f *testing.F) {
	for _, s := range splitterTexts {
		f.Add(s)
	}
	type pair struct {
		fast, ref pieceSplitter
	}
	var pairs []pair
	for _, pattern := range []string{cl100kPattern, qwen2Pattern, o200kPattern} {
		fast, err := newSplitter(pattern)
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{fast, regexSplitter{re: regexp2.MustCompile(pattern, regexp2.None)}})
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, p := range pairs {
			if got, want := splitAll(p.fast, text), splitAll(p.ref, text); !slices.Equal(got, want) {
				t.Fatalf("%T %q:\n got %q\nwant %q", p.fast, text, got, want)
			}
		}
	})
}

func TestRegexSplitterGaps(t *testing.T) {
	s, err := newSplitter(`\d+`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := splitAll(s, "ab12cd345"), []string{"ab", "12", "cd", "345"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q (gaps are pieces too)", got, want)
	}
	s, _ = newSplitter(`x*`) // empty matches cut nothing
	if got, want := splitAll(s, "abxxc"), []string{"ab", "xx", "c"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
