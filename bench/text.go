package bench

import "strings"

// Text synthesizes r's prompt as text for endpoints that take no token ids (chat): the
// prompt of Tokens, each token id written as one word of a fixed list of common English
// words (id modulo the list's length), the words separated by single spaces. Equal
// tokens give equal words, so requests that share hash ids (or a shared prefix) share
// the same leading text, and the text has as many words as the prompt has tokens.
//
// A word is one token in common tokenizers (every word of the list is one token, with
// or without a leading space, in cl100k_base and o200k_base), so the text is about
// r.InputLength tokens; the server's tokenizer and chat template decide the real count,
// which the server reports as usage.prompt_tokens. It fails as Tokens does.
func Text(r Request, blockTokens int) (string, error) {
	ids, err := Tokens(r, blockTokens)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(ids) * 6)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[int(id-firstToken)%len(words)])
	}
	return b.String(), nil
}
