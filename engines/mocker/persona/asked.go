package persona

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String arguments from the user's last message, as a model fills them in: the names
// the message mentions go to string properties ("Weather in Paris?" gives a city
// "Paris"), the question itself to a query-like property ("query", "q", "question",
// "prompt", "text", "search", "input", or a name ending in one of them), and an enum
// value the message names is the one chosen.
//
// Mentions are, in this order: phrases in quotes ("...", '...', “...”, ‘...’, «...»,
// `...`), runs of capitalized words within a sentence (New York, CDG; a number after
// one joins it: June 28), and such runs that begin a sentence (which might only be
// capitalized for that). Common words (What, Please, The, I, ...) are never part of a
// run, and a possessive 's is dropped. A run that starts with the name of a month or a
// weekday is a date; one written in capitals only (CDG, SF) is a code.
//
// A string property without enum, const, pattern or format takes an unused mention
// whose length fits its minLength and maxLength as it is: a property named for a date
// or time (date, day, when, deadline, ...) a date or a quoted phrase; one named for a
// shape of its own (path, email, id, unit, code, ...) a quoted phrase or a code; any
// other any mention but a date, codes last, as they suit patterns better. A property
// with a pattern takes an unused mention that the pattern matches in full (as
// constrained decoding reads it; JSON Schema's search then finds it too) and the
// lengths admit. Among those, a mention after "from" goes first to a property named
// for a start (origin, source, from, departure), one after "to" to a property named for
// an end (destination, target, to, arrival), and neither to the other; then the first
// in order. A query-like property takes the question, cut at a word to its maxLength
// (and padded to its minLength as any string is). Each call's arguments draw on the
// mentions afresh, and so does each object of a top-level array (tool_choice
// "required"'s list of calls). Without a fitting mention the generator's own value
// stands, so every value stays valid against its schema.

// maxQuestion bounds the question, in characters, given to a query-like property.
const maxQuestion = 512

// maxMentions bounds the mentions read from a message.
const maxMentions = 16

// asked is what the user's last message offers string arguments.
type asked struct {
	// question is the message on one line, chat markup left out ("" for none).
	question string
	// lower is question in lower case, for finding enum values in it.
	lower    string
	mentions []mention
}

type mention struct {
	text string
	// quoted: written in quotes, so fit for any string property.
	quoted bool
	// code: all capitals (CDG, SF); date: a month's or weekday's name first (June 28).
	code, date bool
	// dir is +1 after "from", -1 after "to" ("from CDG to NRT"), else 0.
	dir int
}

// newMention returns the mention of text, which q mentions at byte offset at.
func newMention(q string, at int, text string, quoted bool) mention {
	m := mention{text: text, quoted: quoted, code: isCode(text)}
	if ws := strings.FieldsFunc(text, func(r rune) bool { return !isWordRune(r) }); len(ws) > 0 {
		m.date = dateWords[strings.ToLower(ws[0])]
	}
	before := strings.TrimRightFunc(q[:at], func(r rune) bool { return !isWordRune(r) })
	prev := strings.ToLower(before[len(strings.TrimRightFunc(before, isWordRune)):])
	switch prev {
	case "from":
		m.dir = 1
	case "to", "into", "toward", "towards":
		m.dir = -1
	}
	return m
}

// dateWords are the names that make a mention a date.
var dateWords = map[string]bool{}

// readAsked reads the user's message (conversation.user).
func readAsked(user string) *asked {
	q := oneLine(user)
	if utf8.RuneCountInString(q) > maxQuestion {
		q = cutAtWord(q, maxQuestion)
	}
	return &asked{question: q, lower: strings.ToLower(q), mentions: findMentions(q)}
}

// oneLine returns s without chat markup (as words skips it: <|...|>, <｜...｜>, <tag>,
// [TAG]), its white space runs made single spaces, trimmed: text any format can hold.
func oneLine(s string) string {
	var b strings.Builder
	space := false
	for i := 0; i < len(s); {
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
				space = true
				continue
			}
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if unicode.IsSpace(r) || r == utf8.RuneError && size == 1 || unicode.IsControl(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// cutAtWord returns s cut to at most n characters, at the end of a word when one ends
// within them, without trailing spaces or punctuation that opens or joins.
func cutAtWord(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	cut := rs[:n]
	if isWordRune(rs[n]) && n > 0 && isWordRune(rs[n-1]) { // inside a word
		for i := n - 1; i > 0; i-- {
			if rs[i] == ' ' {
				cut = rs[:i]
				break
			}
		}
	}
	out := strings.TrimRight(string(cut), " ,;:-–—(\"'“‘«`")
	if out == "" {
		return string(rs[:n])
	}
	return out
}

// quotePairs are the quotes a phrase is mentioned in, opener to closer.
var quotePairs = map[rune]rune{'"': '"', '“': '”', '„': '“', '«': '»', '\'': '\'', '‘': '’', '`': '`'}

// findMentions returns the phrases q mentions, in the order of the package comment.
func findMentions(q string) []mention {
	var quoted, inner, initial []mention
	rest := []byte(q) // q with quoted phrases blanked out
	for i := 0; i < len(q); {
		r, size := utf8.DecodeRuneInString(q[i:])
		closer, ok := quotePairs[r]
		before, _ := utf8.DecodeLastRuneInString(q[:i])
		if !ok || i > 0 && isWordRune(before) { // an apostrophe: it's
			i += size
			continue
		}
		end := -1
		for j := i + size; j < len(q); {
			c, cs := utf8.DecodeRuneInString(q[j:])
			after, _ := utf8.DecodeRuneInString(q[j+cs:])
			if c == closer && (j+cs == len(q) || !isWordRune(after)) {
				end = j
				break
			}
			j += cs
		}
		if end < 0 {
			i += size
			continue
		}
		text := strings.TrimSpace(q[i+size : end])
		if n := utf8.RuneCountInString(text); n > 0 && n <= 100 && strings.IndexFunc(text, isWordRune) >= 0 {
			quoted = append(quoted, newMention(q, i, text, true))
		}
		_, cs := utf8.DecodeRuneInString(q[end:])
		for k := i; k < end+cs; k++ {
			rest[k] = ' '
		}
		i = end + cs
	}
	// Capitalized runs in what is left: tokens are words as words reads them, plus
	// inner apostrophes (O'Hare, Eiffel's).
	s := string(rest)
	var run []string
	runStart, runInitial, sentenceStart := 0, false, true
	flush := func() {
		if len(run) > 0 {
			text := strings.Join(run, " ")
			for _, p := range []string{"'s", "’s"} {
				text = strings.TrimSuffix(text, p)
			}
			m := newMention(s, runStart, text, false)
			if runInitial {
				initial = append(initial, m)
			} else {
				inner = append(inner, m)
			}
		}
		run = nil
	}
	prevEnd := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isWordRune(r) {
			if strings.ContainsRune(".?!:;\n", r) {
				sentenceStart = true
			}
			i += size
			continue
		}
		j := i
		for j < len(s) {
			c, cs := utf8.DecodeRuneInString(s[j:])
			if isWordRune(c) || strings.ContainsRune(".-_'’&", c) && j > i && j+cs < len(s) && isWordStart(s[j+cs:]) {
				j += cs
				continue
			}
			break
		}
		tok := s[i:j]
		adjacent := s[prevEnd:i] == " "
		first, _ := utf8.DecodeRuneInString(tok)
		switch {
		case unicode.IsUpper(first) && !commonWords[strings.ToLower(tok)]:
			if len(run) == 0 || !adjacent {
				flush()
				runStart, runInitial = i, sentenceStart
			}
			run = append(run, tok)
		case isNumber(tok) && len(run) > 0 && adjacent:
			run = append(run, tok)
		default:
			flush()
		}
		sentenceStart = false
		prevEnd = j
		i = j
	}
	flush()
	var out []mention
	seen := map[string]bool{}
	for _, group := range [][]mention{quoted, inner, initial} {
		for _, m := range group {
			if !seen[m.text] && len(out) < maxMentions {
				seen[m.text] = true
				out = append(out, m)
			}
		}
	}
	return out
}

func isNumber(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) < 0
}

// isCode reports whether s is written in capitals only (CDG, SF, NASA-2): two letters
// or more, none in lower case.
func isCode(s string) bool {
	letters := 0
	for _, r := range s {
		switch {
		case unicode.IsLower(r), unicode.IsSpace(r):
			return false
		case unicode.IsLetter(r):
			letters++
		}
	}
	return letters >= 2
}

// commonWords are capitalized only for beginning a sentence or a title: never a
// mention, they end a run of capitalized words.
var commonWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the and but or so then also please pls hi hello hey thanks thank
		what what's whats where where's when when's who who's whom whose why how how's which
		is are was were am be been being can can't could couldn't would wouldn't should
		do does did don't doesn't didn't have has had i i'm i've i'd i'll let let's
		tell show find get give plan make create list search look book send check write read
		open add set put run call help compare explain describe summarize translate
		calculate convert use try ask my our your their his her its this that these those
		there here in on at for from to with of by about after before if it it's we you he
		she they yes no ok okay now today tomorrow yesterday next last any some all just not
		there's`) {
		commonWords[w] = true
	}
	for w := range commonWords {
		if strings.Contains(w, "'") {
			commonWords[strings.ReplaceAll(w, "'", "’")] = true
		}
	}
	for _, w := range strings.Fields(`monday tuesday wednesday thursday friday saturday sunday
		january february march april may june july august september october november december`) {
		dateWords[w] = true
	}
}

// nameParts splits a property name into its lower-case words: snake_case, kebab-case,
// camelCase and dotted names alike (userQuery → user, query).
func nameParts(name string) []string {
	var parts []string
	var cur []rune
	prevLower := false
	for _, r := range name {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			if len(cur) > 0 {
				parts = append(parts, string(cur))
			}
			cur, prevLower = nil, false
			continue
		case unicode.IsUpper(r) && prevLower:
			parts = append(parts, string(cur))
			cur = nil
		}
		cur = append(cur, unicode.ToLower(r))
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
	}
	if len(cur) > 0 {
		parts = append(parts, string(cur))
	}
	return parts
}

// queryNames are the last words of a property name that asks for the question itself.
var queryNames = words2set(`query queries q question questions prompt text search input`)

// dateNames are words of a property name that asks for a date or a time.
var dateNames = words2set(`date day days time when deadline due datetime timestamp start end
	until since weekday month schedule`)

// shapeNames are words of a property name that asks for a value of a shape of its own,
// which a capitalized name does not have.
var shapeNames = words2set(`email mail url uri link href path file filename dir directory folder
	unit units command cmd code id uuid lang locale phone password token version regex sql`)

// fromNames and toNames are words of a property name for the start and the end of a
// route.
var (
	fromNames = words2set(`origin from source src departure depart`)
	toNames   = words2set(`destination dest to target arrival arrive`)
)

func words2set(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(s) {
		out[w] = true
	}
	return out
}

func queryLike(name string) bool {
	parts := nameParts(name)
	return len(parts) > 0 && queryNames[parts[len(parts)-1]]
}

// named reports whether a word of name is in set.
func named(name string, set map[string]bool) bool {
	for _, p := range nameParts(name) {
		if set[p] {
			return true
		}
	}
	return false
}

// fromAsked returns the string for the property being generated that the user's
// message gives (see the comment at the top of this file); false when it gives none.
func (g *generator) fromAsked(minLen, maxLen int) (string, bool) {
	if g.user == nil {
		return "", false
	}
	if queryLike(g.name) && g.user.question != "" {
		return cutAtWord(g.user.question, maxLen), true
	}
	dated, shaped := named(g.name, dateNames), named(g.name, shapeNames)
	return g.pick(minLen, maxLen, !dated && !shaped, func(m mention) bool {
		switch {
		case m.quoted:
			return true
		case dated:
			return m.date
		case shaped:
			return m.code
		}
		return !m.date
	})
}

// matching returns an unused mention the pattern matches in full, within the lengths;
// false for none (or a pattern Go's regexp does not read).
func (g *generator) matching(pattern string, minLen, maxLen int) (string, bool) {
	if g.user == nil || len(g.user.mentions) == 0 {
		return "", false
	}
	re, ok := g.patterns[pattern]
	if !ok {
		re, _ = regexp.Compile(`^(?:` + pattern + `)$`)
		if g.patterns == nil {
			g.patterns = map[string]*regexp.Regexp{}
		}
		g.patterns[pattern] = re
	}
	if re == nil {
		return "", false
	}
	return g.pick(minLen, maxLen, false, func(m mention) bool { return re.MatchString(m.text) })
}

// pick marks used and returns the unused mention that admit accepts and the lengths
// fit, preferring one whose direction ("from", "to") is the property's, then one that
// is not a code when codesLast, then the first; false for none.
func (g *generator) pick(minLen, maxLen int, codesLast bool, admit func(mention) bool) (string, bool) {
	dir := 0
	switch {
	case named(g.name, fromNames):
		dir = 1
	case named(g.name, toNames):
		dir = -1
	}
	best, bestScore := -1, -1
	for i, m := range g.user.mentions {
		if n := utf8.RuneCountInString(m.text); g.used[i] || n < minLen || n > maxLen || !admit(m) {
			continue
		}
		score := 4
		if dir != 0 && m.dir == dir {
			score = 6
		} else if dir != 0 && m.dir == -dir {
			score = 0
		}
		if codesLast && m.code {
			score--
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return "", false
	}
	g.used[best] = true
	return g.user.mentions[best].text, true
}

// namedEnum returns the first string of an enum that the user's message names as a
// word or words of its own (case aside): "in fahrenheit" chooses "fahrenheit".
func (g *generator) namedEnum(values []any) (any, bool) {
	if g.user == nil || g.user.lower == "" {
		return nil, false
	}
	for _, v := range values {
		s, ok := v.(string)
		if !ok || utf8.RuneCountInString(s) < 2 {
			continue
		}
		if containsWord(g.user.lower, strings.ToLower(s)) {
			return s, true
		}
	}
	return nil, false
}

// containsWord reports whether w occurs in s with no letter or digit on either side.
func containsWord(s, w string) bool {
	for from := 0; from <= len(s); {
		i := strings.Index(s[from:], w)
		if i < 0 {
			return false
		}
		i += from
		before, _ := utf8.DecodeLastRuneInString(s[:i])
		after, _ := utf8.DecodeRuneInString(s[i+len(w):])
		if (i == 0 || !isWordRune(before)) && (i+len(w) == len(s) || !isWordRune(after)) {
			return true
		}
		from = i + 1
	}
	return false
}

// resetAsked makes every mention unused again (a new call's arguments).
func (g *generator) resetAsked() {
	if g.user != nil {
		g.used = make([]bool, len(g.user.mentions))
	}
}
