package peertest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Apache starts Apache httpd with mod_dav (Debian package apache2) for tb and
// returns its base URL, "http://127.0.0.1:PORT" with no trailing slash.
//
// The whole URL space is one WebDAV tree backed by an empty temporary
// directory: a PUT to {base}/{name} creates a file, and honours
// If-None-Match: * (201, then 412 for a name that exists). A PUT below a
// collection that does not exist ({base}/missing/{name}) answers 409, which
// is how WebDAV says the parent collection is missing.
//
// httpd runs in the foreground with a generated configuration that loads
// only the modules it needs from the installation's module directory. Run
// as root, httpd serves requests as an unprivileged user (www-data, else
// nobody), which owns the WebDAV directory.
func Apache(tb testing.TB) string {
	tb.Helper()
	l, err := apacheLaunch(peerDir(tb, "apache"))
	check(tb, err)
	return serve(tb, l)
}

// apacheLaunch finds httpd and its modules and prepares dir for it.
func apacheLaunch(dir string) (launch, error) {
	bin, err := lookPath("Debian package apache2", "apache2", "httpd")
	if err != nil {
		return launch{}, err
	}
	modules, err := apacheModules(bin)
	if err != nil {
		return launch{}, err
	}
	davDir := filepath.Join(dir, "dav")
	lockDir := filepath.Join(dir, "lock")
	for _, d := range []string{davDir, lockDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return launch{}, err
		}
	}
	var runAs string
	if os.Geteuid() == 0 {
		uid, gid, err := unprivileged()
		if err != nil {
			return launch{}, err
		}
		for _, d := range []string{davDir, lockDir} {
			if err := os.Chown(d, uid, gid); err != nil {
				return launch{}, err
			}
		}
		runAs = fmt.Sprintf("User #%d\nGroup #%d\n", uid, gid)
	}
	conf := filepath.Join(dir, "httpd.conf")
	args := func(port int) ([]string, error) {
		text := fmt.Sprintf(`ServerRoot %[1]q
ServerName 127.0.0.1
Listen 127.0.0.1:%[2]d
PidFile %[3]q
DefaultRuntimeDir %[1]q
ErrorLog /dev/stderr
LogLevel warn
%[4]s%[5]s
DavLockDB %[6]q
DocumentRoot %[7]q
<Directory %[7]q>
    Dav On
    Require all granted
</Directory>
`, dir, port, filepath.Join(dir, "httpd.pid"),
			modules, runAs, filepath.Join(lockDir, "davlock"), davDir)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, err
		}
		return []string{"-f", conf, "-D", "FOREGROUND"}, nil
	}
	return launch{name: "apache2", bin: bin, dir: dir, args: args}, nil
}

// apacheModules returns the LoadModule lines for what the WebDAV
// configuration needs and httpd was not built with: an MPM, unixd,
// authz_core, dav and dav_fs. The module directory is found next to the
// program, where Debian, Fedora and Homebrew put it.
func apacheModules(bin string) (string, error) {
	out, err := exec.Command(bin, "-l").Output()
	if err != nil {
		return "", fmt.Errorf("%s -l: %w", bin, err)
	}
	builtIn := string(out)
	resolved, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "", err
	}
	prefix := filepath.Dir(filepath.Dir(resolved))
	var modDir string
	for _, rel := range []string{"lib/apache2/modules", "lib64/httpd/modules", "lib/httpd/modules", "libexec/apache2"} {
		d := filepath.Join(prefix, rel)
		if _, err := os.Stat(filepath.Join(d, "mod_dav.so")); err == nil {
			modDir = d
			break
		}
	}
	if modDir == "" && !strings.Contains(builtIn, "mod_dav.c") {
		return "", fmt.Errorf("%w: mod_dav.so is not in the module directory under %s", errUnavailable, prefix)
	}
	var b strings.Builder
	if !strings.Contains(builtIn, "event.c") && !strings.Contains(builtIn, "prefork.c") && !strings.Contains(builtIn, "worker.c") {
		found := false
		for _, mpm := range []string{"mpm_event", "mpm_prefork", "mpm_worker"} {
			so := filepath.Join(modDir, "mod_"+mpm+".so")
			if _, err := os.Stat(so); err == nil {
				fmt.Fprintf(&b, "LoadModule %s_module %q\n", mpm, so)
				found = true
				break
			}
		}
		if !found {
			return "", fmt.Errorf("%w: no MPM module in %s", errUnavailable, modDir)
		}
	}
	for _, name := range []string{"unixd", "authz_core", "dav", "dav_fs"} {
		if strings.Contains(builtIn, "mod_"+name+".c") {
			continue
		}
		so := filepath.Join(modDir, "mod_"+name+".so")
		if _, err := os.Stat(so); err != nil {
			return "", fmt.Errorf("%w: mod_%s.so is not in %s", errUnavailable, name, modDir)
		}
		fmt.Fprintf(&b, "LoadModule %s_module %q\n", name, so)
	}
	return b.String(), nil
}

// unprivileged returns the user and group that httpd started as root
// serves requests as: www-data where it exists, else nobody.
func unprivileged() (uid, gid int, err error) {
	for _, name := range []string{"www-data", "nobody"} {
		u, lookErr := user.Lookup(name)
		if lookErr != nil {
			err = lookErr
			continue
		}
		uid, err = strconv.Atoi(u.Uid)
		if err != nil {
			return 0, 0, err
		}
		gid, err = strconv.Atoi(u.Gid)
		return uid, gid, err
	}
	return 0, 0, fmt.Errorf("no unprivileged user for httpd to run as: %w", err)
}
