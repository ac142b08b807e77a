package preprocess

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
	extra := []rune("'sStTrReEvVmMlLdD \t\n\r\v\f\u0085\u00a0\u2028!?.-1²٣Ⅻ")
	for range 3000 {
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
	for _, pattern := range []string{cl100kPattern, qwen2Pattern} {
		fast, err := newSplitter(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := fast.(gptSplitter); !ok {
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

// TestCharacterClasses checks the classes the hand-written splitter uses against
// regexp2's \s, \p{L} and \p{N}, for the Basic Multilingual Plane and a sample of the
// rest.
func TestCharacterClasses(t *testing.T) {
	re := regexp2.MustCompile(`^(?:(\s)|(\p{L})|(\p{N}))$`, regexp2.None)
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r > 0xFFFF {
			r += 30
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
	}
}

// FuzzGPTSplitter: the hand-written splitter and regexp2 agree on any text.
func FuzzGPTSplitter(f *testing.F) {
	for _, s := range splitterTexts {
		f.Add(s)
	}
	fastCL, fastQwen := gptSplitter{maxDigits: 3}, gptSplitter{maxDigits: 1}
	refCL := regexSplitter{re: regexp2.MustCompile(cl100kPattern, regexp2.None)}
	refQwen := regexSplitter{re: regexp2.MustCompile(qwen2Pattern, regexp2.None)}
	f.Fuzz(func(t *testing.T, text string) {
		if got, want := splitAll(fastCL, text), splitAll(refCL, text); !slices.Equal(got, want) {
			t.Fatalf("cl100k %q:\n got %q\nwant %q", text, got, want)
		}
		if got, want := splitAll(fastQwen, text), splitAll(refQwen, text); !slices.Equal(got, want) {
			t.Fatalf("qwen2 %q:\n got %q\nwant %q", text, got, want)
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
