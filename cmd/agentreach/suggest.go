package main

import "fmt"

// nearest returns the name in names closest to word by Damerau-Levenshtein
// distance (optimal string alignment: insertions, deletions, substitutions
// and swaps of two neighbours), when it is close enough to be what was
// meant: at most 1 edit for words up to 4 characters, else 2, and fewer
// edits than the word has characters. The first of equally close names
// wins; a word that is itself a name has no suggestion.
func nearest(word string, names []string) (string, bool) {
	limit := 2
	if len([]rune(word)) <= 4 {
		limit = 1
	}
	best, bestDist := "", limit+1
	for _, n := range names {
		d := editDistance(word, n)
		if d == 0 {
			return "", false
		}
		if d < bestDist && d < len([]rune(word)) {
			best, bestDist = n, d
		}
	}
	return best, best != ""
}

// didYouMean is the hint for word: ` (did you mean "name"?)` with the
// nearest of names, or "".
func didYouMean(word string, names []string) string {
	if n, ok := nearest(word, names); ok {
		return fmt.Sprintf(" (did you mean %q?)", n)
	}
	return ""
}

// editDistance is the optimal string alignment distance of a and b.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// d[i][j] is the distance of s[:i] and t[:j].
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}
