package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
)

const keyAbout = `Prints the key of each non-blank line of FILE ("-" reads stdin) as
LINE<TAB>KEY, without depositing anything: compare keys with other languages'
implementations, or check what --ignore changes. Invalid lines are reported on
stderr with their line number, in the words of deposit run (a line that is not
a document, such as 42 or a bare string, among them); the exit status is then 1.

With --identity (as deposit run takes it) each line is LINE<TAB>OBJECT<TAB>KEY:
the object key, which names the object's one record, and the content key,
which names this version of it.

A target that keys its lines its own way is named with --protocol: under
crossref a line is one work, {"doi":D,"xml":X} or {"doi":D,"xml_file":P} with
P beside FILE, and the key leaves out the content of the XML's first
doi_batch_id and timestamp elements (docs/targets/crossref.md); a work is an
object named by its DOI, so each line is LINE<TAB>OBJECT<TAB>KEY. Under
datacite the DOI a payload names (attributes.doi) is folded to lower case
before the line is keyed, as deposit run does: DOI names are
case-insensitive (docs/targets/datacite.md).`

func keyCmd(ctx context.Context, args []string, s streams) int {
	var (
		formName     string
		ignore       stringList
		datasets     string
		maxLineBytes int64
		proto        string
		identity     stringList
		versionPtr   string
	)
	c := newCommand("key", "deposit key [--form jcs|python] [--ignore POINTER]... [--identity POINTER]... [--version-pointer POINTER] [--datasets DIR] [--max-line-bytes N] [--protocol crossref|datacite] FILE|-", keyAbout, "")
	c.fs.StringVar(&formName, "form", "jcs", "canonical form: jcs (RFC 8785) or python (json.dumps sort_keys, compact)")
	c.fs.Var(&ignore, "ignore", "JSON `POINTER` (RFC 6901) left out of the key; repeatable")
	c.fs.Var(&identity, "identity", "JSON `POINTER` whose value names the object a line describes; repeatable: print its object key too")
	c.fs.StringVar(&versionPtr, "version-pointer", "", "with --identity: JSON `POINTER` of a line's version, checked as deposit run checks it")
	c.fs.StringVar(&datasets, "datasets", "", "each line is {\"metadata\":M,\"files\":[P,...]}, P relative to `DIR`")
	c.fs.Int64Var(&maxLineBytes, "max-line-bytes", defaultMaxLineBytes, "longest line accepted, in bytes")
	c.fs.StringVar(&proto, "protocol", "", "key lines as this target reads them: crossref (one work per line), datacite (the DOI a line names in lower case); default: the payload as it is")
	pos, code, ok := c.parse(args, s)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(s, `want one input: FILE, or "-" for stdin`)
	}
	if maxLineBytes < 1 || maxLineBytes > 1<<30 {
		return c.usageError(s, "--max-line-bytes must be between 1 and 1 GiB")
	}
	form, err := canonical.ParseForm(formName)
	if err != nil {
		return c.usageError(s, "--form: %v", err)
	}
	keyer, err := canonical.NewKeyer(form, ignore)
	if err != nil {
		return c.usageError(s, "--ignore: %v", err)
	}
	if datasets != "" {
		if fi, err := os.Stat(datasets); err != nil || !fi.IsDir() {
			return c.usageError(s, "--datasets %s: not a directory", datasets)
		}
	}
	if err := client.Identify(&canonical.Keyed{}, identity, versionPtr); err != nil && (len(identity) > 0 || versionPtr != "") && errors.Is(err, client.ErrConfig) {
		return c.usageError(s, "%v", err)
	}
	drv, err := keyDriver(proto, pos[0])
	if err != nil {
		return c.usageError(s, "--protocol: %v", err)
	}
	if own, ok := drv.(driver.Identified); ok && len(identity) == 0 {
		// A target that names its objects itself (crossref: the DOI).
		identity, versionPtr = own.Identity()
	}
	in, _, err := openInput(pos[0], s.stdin)
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit key: %v\n", err)
		return exitStop
	}
	defer in.Close()

	out := bufio.NewWriterSize(s.stdout, 64<<10)
	defer out.Flush()
	lr := client.NewLineReader(in, int(maxLineBytes))
	invalid := 0
	for it := range items(lr.Items(), form, datasets) {
		if ctx.Err() != nil {
			break
		}
		key, err := keyOf(keyer, drv, it, identity, versionPtr)
		if err != nil {
			invalid++
			out.Flush()
			fmt.Fprintf(s.stderr, "line %d: invalid: %s\n", it.Line, invalidReason(err))
			continue
		}
		fmt.Fprintf(out, "%d\t%s\n", it.Line, key)
	}
	if err := lr.Err(); err != nil {
		out.Flush()
		fmt.Fprintf(s.stderr, "deposit key: %v\n", err)
		return exitStop
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(s.stderr, "deposit key: %v\n", err)
		return exitStop
	}
	if ctx.Err() != nil {
		return exitUnresolved
	}
	if invalid > 0 {
		return exitFailed
	}
	return exitDone
}

// keyDriver is the driver that keys the lines of input under proto: a
// target that reads its payloads its own way (its table entry's ownKeys);
// nil for any other, whose key is the payload's own.
func keyDriver(proto, input string) (driver.Driver, error) {
	if proto == "" {
		return nil, nil
	}
	name, err := protocol.Parse(proto)
	if err != nil {
		return nil, err
	}
	spec := targetSpecs[name]
	if spec.ownKeys == nil {
		return nil, nil
	}
	return spec.ownKeys(inputDir(input)).Driver()
}

// keyOf is the key of one input item, as drv reads it when set. A line
// is keyed as deposit run keys it (client.KeyPayload), so that key refuses
// the lines run refuses, in the same words.
func keyOf(k *canonical.Keyer, drv driver.Driver, it client.Item, identity []string, versionPtr string) (string, error) {
	if it.Err != nil {
		return "", it.Err
	}
	var keyed canonical.Keyed
	var err error
	if d := it.Dataset; d != nil {
		keyed, err = k.DatasetKey(d.Dir, d.Metadata, d.Files)
		// As deposit run reads them: in the dataset's metadata.
		identity, versionPtr = inMetadata(identity), inMetadata([]string{versionPtr})[0]
	} else {
		keyed, err = client.KeyPayload(k, drv, it.Payload)
	}
	if err != nil || len(identity) == 0 {
		return keyed.Key, err
	}
	if err := client.Identify(&keyed, identity, versionPtr); err != nil {
		return "", err
	}
	return keyed.Object + "\t" + keyed.Key, nil
}

// inMetadata is pointers as they address a dataset's keyed document, which
// holds its metadata under "metadata"; "" stays "".
func inMetadata(pointers []string) []string {
	out := make([]string, len(pointers))
	for i, p := range pointers {
		if p != "" {
			out[i] = "/metadata" + p
		}
	}
	return out
}
