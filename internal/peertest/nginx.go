package peertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Nginx starts nginx with its dav module (Debian package nginx) for tb and
// returns its base URL, "http://127.0.0.1:PORT" with no trailing slash.
//
// It is the server that ignores If-None-Match: a PUT to {base}/{name}
// creates a file (201) and a second PUT to the same name replaces it (204),
// whatever the request's conditions say. A PUT below a directory that does
// not exist answers 500.
//
// nginx runs in the foreground as a single process (no master, no worker
// user switch) with a generated configuration in a temporary directory.
func Nginx(tb testing.TB) string {
	tb.Helper()
	l, err := nginxLaunch(peerDir(tb, "nginx"))
	check(tb, err)
	return serve(tb, l)
}

// nginxLaunch finds nginx, checks that it has the dav module and prepares
// dir for it.
func nginxLaunch(dir string) (launch, error) {
	bin, err := lookPath("Debian package nginx", "nginx")
	if err != nil {
		return launch{}, err
	}
	// nginx -V prints its build options on stderr.
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		return launch{}, fmt.Errorf("%s -V: %w: %s", bin, err, out)
	}
	if !strings.Contains(string(out), "--with-http_dav_module") {
		return launch{}, fmt.Errorf("%w: %s was built without --with-http_dav_module", errUnavailable, bin)
	}
	davDir := filepath.Join(dir, "dav")
	if err := os.Mkdir(davDir, 0o755); err != nil {
		return launch{}, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	args := func(port int) ([]string, error) {
		text := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]q;
error_log stderr warn;
events {
    worker_connections 256;
}
http {
    access_log off;
    client_body_temp_path %[2]q;
    proxy_temp_path %[3]q;
    fastcgi_temp_path %[4]q;
    uwsgi_temp_path %[5]q;
    scgi_temp_path %[6]q;
    server {
        listen 127.0.0.1:%[7]d;
        root %[8]q;
        location / {
            dav_methods PUT DELETE MKCOL COPY MOVE;
            client_max_body_size 0;
        }
    }
}
`, filepath.Join(dir, "nginx.pid"),
			filepath.Join(dir, "body"), filepath.Join(dir, "proxy"), filepath.Join(dir, "fastcgi"),
			filepath.Join(dir, "uwsgi"), filepath.Join(dir, "scgi"), port, davDir)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, err
		}
		return []string{"-p", dir, "-c", conf, "-e", "stderr"}, nil
	}
	return launch{name: "nginx", bin: bin, dir: dir, args: args}, nil
}
