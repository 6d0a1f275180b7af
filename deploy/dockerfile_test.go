package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// stage is one FROM section of a Dockerfile, continuation lines joined.
type stage struct {
	from, name   string
	instructions []string // "RUN ...", "COPY ...", in order
}

// parseDockerfile splits a Dockerfile into its global ARGs and stages. It
// understands what our Dockerfile uses: comments, parser directives,
// backslash continuations, FROM [--platform=..] image [AS name].
func parseDockerfile(text string) (args []string, stages []stage) {
	var lines []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") || (t == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		lines = append(lines, strings.Join(strings.Fields(cur+t), " "))
		cur = ""
	}
	for _, l := range lines {
		if l == "" {
			continue
		}
		kw, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(kw) {
		case "FROM":
			f := strings.Fields(rest)
			if len(f) > 0 && strings.HasPrefix(f[0], "--platform=") {
				f = f[1:]
			}
			s := stage{}
			if len(f) > 0 {
				s.from = f[0]
			}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		default:
			if len(stages) == 0 {
				args = append(args, l)
			} else {
				stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, l)
			}
		}
	}
	return args, stages
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	args, stages := parseDockerfile(string(b))
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	argVal := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "ARG "), "="); ok {
			argVal[k] = v
		}
	}
	build, final := stages[0], stages[len(stages)-1]
	if build.name == "" {
		t.Errorf("build stage has no name")
	}
	var buildCmd string
	for _, in := range build.instructions {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build") {
			buildCmd = in
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/driver", "-o /out/driver", "-X main.version="} {
		if !strings.Contains(buildCmd, want) {
			t.Errorf("go build step %q lacks %q (static, reproducible binary)", buildCmd, want)
		}
	}
	if !strings.HasPrefix(argVal["GO_IMAGE"], "golang:1.26") {
		t.Errorf("GO_IMAGE %q, want golang:1.26 (go.mod's Go)", argVal["GO_IMAGE"])
	}
	base := final.from
	if m := regexp.MustCompile(`^\$\{(\w+)\}$`).FindStringSubmatch(base); m != nil {
		base = argVal[m[1]]
	}
	if !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("runtime base %q, want a distroless static image (the binary is static)", base)
	}
	var user, entry string
	copied := false
	for _, in := range final.instructions {
		switch {
		case strings.HasPrefix(in, "USER "):
			user = strings.TrimPrefix(in, "USER ")
		case strings.HasPrefix(in, "ENTRYPOINT "):
			entry = strings.TrimPrefix(in, "ENTRYPOINT ")
		case strings.HasPrefix(in, "COPY --from="+build.name+" /out/driver /driver"):
			copied = true
		case strings.HasPrefix(in, "RUN "):
			t.Errorf("runtime stage runs %q: distroless has no shell", in)
		}
	}
	if !copied {
		t.Error("runtime stage does not copy /out/driver from the build stage to /driver")
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q, want non-root", user)
	}
	if entry != `["/driver"]` {
		t.Errorf("ENTRYPOINT %s, want [\"/driver\"]", entry)
	}

	ign, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"*", "!go.mod", "!go.sum", "!cmd/", "!pkg/"} {
		if !strings.Contains("\n"+string(ign)+"\n", "\n"+want+"\n") {
			t.Errorf(".dockerignore lacks line %q", want)
		}
	}
}
