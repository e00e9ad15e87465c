package client

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// FuzzLineReader checks the streaming line reader against the plain reading
// of the rules: split on "\n", drop one trailing "\r", a line over max is
// too long (even a blank one), a blank line is skipped, numbers count every
// physical line. The reader's buffer is made tiny so long lines take the
// path that assembles them from several reads.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n\n  \n{\"b\":2}\r\n{\"c\":3}"), 8)
	f.Add([]byte("0123456789abcdefghij\nshort\n"), 10)
	f.Add([]byte("\r\n\r\r\nx\r"), 1)
	f.Add([]byte(""), 4)
	f.Fuzz(func(t *testing.T, input []byte, max int) {
		if max < 1 || max > 64 {
			return
		}
		type line struct {
			num     int64
			text    string
			tooLong bool
		}
		var want []line
		parts := bytes.Split(input, []byte("\n"))
		if len(parts[len(parts)-1]) == 0 {
			parts = parts[:len(parts)-1] // the input ended with "\n" (or was empty)
		}
		for i, p := range parts {
			p = bytes.TrimSuffix(p, []byte("\r"))
			switch {
			case len(p) > max:
				want = append(want, line{num: int64(i + 1), tooLong: true})
			case !blank(p):
				want = append(want, line{num: int64(i + 1), text: string(p)})
			}
		}

		lr := &LineReader{r: bufio.NewReaderSize(bytes.NewReader(input), 16), max: max}
		var got []line
		for it := range lr.Items() {
			if it.Err != nil && !errors.Is(it.Err, ErrLineTooLong) {
				t.Fatalf("line %d: unexpected error %v", it.Line, it.Err)
			}
			got = append(got, line{num: it.Line, text: string(it.Payload), tooLong: it.Err != nil})
		}
		if err := lr.Err(); err != nil {
			t.Fatalf("read error: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("got %d lines %+v, want %d %+v", len(got), got, len(want), want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("line %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
		if lr.BytesRead() != int64(len(input)) {
			t.Fatalf("read %d bytes of %d", lr.BytesRead(), len(input))
		}
	})
}
