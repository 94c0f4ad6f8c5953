// Package fetch downloads the public datasets the examples and tests train
// on (MNIST, Fashion-MNIST, a9a, MovieLens 100K, the AP corpus) and checks
// them against their SHA-256 sums.
//
// Fetch(ctx, "mnist", dir, nil) leaves the four files of MNIST in
// dir/mnist/, the layout of the shared data directory, which a model's
// --data_dir may name directly. Each file is written to a temporary file in
// the same folder, checked, and only then renamed into place, so a reader
// never sees a partial or corrupt file. Files already present and valid are
// not downloaded again. Mirrors are tried in order for each file.
//
// Without a network, Fetch fails with ErrOffline and a message saying how to
// use a local copy instead.
//
// A Fetcher holds no mutable state: one may serve concurrent Fetch calls, as
// long as they write to different folders.
package fetch

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Errors, matched with errors.Is.
var (
	ErrUnknownDataset = errors.New("fetch: unknown dataset")
	ErrChecksum       = errors.New("fetch: checksum mismatch")
	ErrOffline        = errors.New("fetch: no mirror reachable")
	ErrStalled        = errors.New("fetch: download stalled")
)

// File is one file of a dataset as published.
type File struct {
	Name   string
	Size   int64
	SHA256 string // hex
}

type dataset struct {
	mirrors []string
	files   []File
	// archive, if set, is a zip file published at the mirrors holding
	// the files under the folder dir: Fetch downloads it and extracts the
	// files, checking each one's sum. The archive itself has no sum here
	// (see its dataset), so only its size is bounded.
	archive, dir string
}

// maxArchive bounds the download of an archive without a known sum.
const maxArchive = 256 << 20

// The sums are those of the canonical files (see the shared data README).
var datasets = map[string]dataset{
	// MovieLens 100K (GroupLens; research use, no redistribution: fetched
	// by each user, never shipped). The files' sums are those of the shared
	// data directory's copies, which agree across independent copies; the
	// sum of GroupLens' ml-100k.zip could not be checked offline, so the
	// zip is trusted only as far as the files it holds match these.
	"ml-100k": {
		mirrors: []string{"https://files.grouplens.org/datasets/movielens/"},
		archive: "ml-100k.zip", dir: "ml-100k",
		files: []File{
			{"README", 6750, "4883b8cf340ed0059971b33f56ad3adc88a40792108ebca3d24aafc4c82e8b52"},
			{"u.data", 1979173, "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490"},
			{"u.genre", 202, "9757e0d3e6b298159a80dd48eaf938114690e911e39af97a76949ef1663610bb"},
			{"u.info", 36, "5b0a40b2e47a729ee6203063f6dcf8790c2e63f5a18663e6ee318a72c5f3c27b"},
			{"u.item", 236344, "553841ebc7de3a0fd0d6b62a204ea30c1e651aacfb2814c7a6584ac52f2c5701"},
			{"u.occupation", 193, "cd5fbec9afe345d993a62fc7817df1a4a9079c4feb267b3118763b8fd942137d"},
			{"u.user", 22628, "f120e114da2e8cf314fd28f99417c94ae9ddf1cb6db8ce0e4b5995d40e90e62c"},
			{"u1.base", 1586544, "ce253ec86c448b44fb3ba9a30d12dcfc2e9210cbde71efada3730c22e9ac212a"},
			{"u1.test", 392629, "18c6014a4b2c7324f250a63f8904a7b16b2b19f911129e346141507b0cbac950"},
			{"u2.base", 1583948, "6c06f0b5df4b256da1a994f3ac66edc8da4d3f09bc9282df6b14d893366d703e"},
			{"u2.test", 395225, "4de658d1e04ed9104629509a2e2528fce833ac8e048280183f1df167632038c3"},
			{"u3.base", 1582546, "afdc155c291c6edc41c0407e39d7462eb98d341e064f0b0a12175b80b3c4af5d"},
			{"u3.test", 396627, "0f548b51c78327de4c156461d3e430b7e5579fe2b5681586a59416e48fd35f6d"},
			{"u4.base", 1581878, "219f0f4d40dfe9c5141d425f53fa91ee23ed275f14e280bbf1b50117afb064ca"},
			{"u4.test", 397295, "7c02ad0a1e7ab1083c8b9d4b627203a051dd7b5eab46d99fa44de33470de8db9"},
			{"u5.base", 1581776, "a9574e59ce961eec2121627760b6e9b0974ce1637b3fe69ac32cb14a4bfab485"},
			{"u5.test", 397397, "351cc52e0d15b6c721466276fc24671d40936899e3d01fadeaf312915b8c5634"},
			{"ua.base", 1792501, "67b5bcdb380c29f85d56a012ecd88612ae020f30a6730d117a334ee8203b91f2"},
			{"ua.test", 186672, "d0497e202417720f57a184ec8c66be2d1afa4ff41bb53787c57b28d6bf79bc42"},
			{"ub.base", 1792476, "237254d253b6ad7de84f919d041055428646254f34ed8f562703c899430cd881"},
			{"ub.test", 186697, "d54a72d05730d5892062734b2bec73e976f9b713d18c828a18b968d6cce442da"},
		},
	},
	"mnist": {
		mirrors: []string{
			"https://storage.googleapis.com/cvdf-datasets/mnist/",
			"https://ossci-datasets.s3.amazonaws.com/mnist/",
		},
		files: []File{
			{"train-images-idx3-ubyte.gz", 9912422, "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"},
			{"train-labels-idx1-ubyte.gz", 28881, "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"},
			{"t10k-images-idx3-ubyte.gz", 1648877, "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"},
			{"t10k-labels-idx1-ubyte.gz", 4542, "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"},
		},
	},
	"fashion-mnist": {
		mirrors: []string{
			"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
		},
		files: []File{
			{"train-images-idx3-ubyte.gz", 26421880, "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"},
			{"train-labels-idx1-ubyte.gz", 29515, "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845"},
			{"t10k-images-idx3-ubyte.gz", 4422102, "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"},
			{"t10k-labels-idx1-ubyte.gz", 5148, "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"},
		},
	},
	// LIBSVM's a9a (UCI Adult, binarised): training and test files.
	"a9a": {
		mirrors: []string{
			"https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/",
		},
		files: []File{
			{"a9a", 2329875, "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906"},
			{"a9a.t", 1164628, "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"},
		},
	},
	// The AP corpus of Blei's lda-c (ap.tgz), as bag-of-words and vocabulary.
	"ap": {
		mirrors: []string{
			"https://raw.githubusercontent.com/cjrd/SimpleLDA-R/master/data/",
		},
		files: []File{
			{"ap.dat", 1926195, "ef1003dad74df696cdd3bab85e7c1d20a3eb1494a9e847e899224894d5ccf6d9"},
			{"vocab.txt", 85532, "fbf0d0f836cb2b0360bd3cae0f71c2f34b140b1dd8dd0d0bdb618a64704337f6"},
		},
	},
}

// Datasets lists the names Fetch knows, sorted.
func Datasets() []string {
	names := make([]string, 0, len(datasets))
	for n := range datasets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func lookup(name string) (dataset, error) {
	ds, ok := datasets[name]
	if !ok {
		return dataset{}, fmt.Errorf("%w %q: want one of %s", ErrUnknownDataset, name, strings.Join(Datasets(), ", "))
	}
	return ds, nil
}

// Files lists the files of dataset with their sizes and sums.
func Files(name string) ([]File, error) {
	ds, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return slices.Clone(ds.files), nil
}

// Mirrors lists the default mirrors of dataset, in the order they are tried.
func Mirrors(name string) ([]string, error) {
	ds, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return slices.Clone(ds.mirrors), nil
}

// DefaultDir is where datasets go when no folder is named: $PARAMSERV_DATA
// if set, else paramserv/data in the user's cache folder.
func DefaultDir() (string, error) {
	if d := os.Getenv("PARAMSERV_DATA"); d != "" {
		return d, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("fetch: no data folder: PARAMSERV_DATA is unset and %w", err)
	}
	return filepath.Join(cache, "paramserv", "data"), nil
}

// Fetch downloads dataset into dir/<dataset>/ with a default Fetcher.
// mirrors, if not empty, replaces the dataset's default mirrors (base URLs
// to which the file names are appended).
func Fetch(ctx context.Context, dataset, dir string, mirrors []string) error {
	return (&Fetcher{}).Fetch(ctx, dataset, dir, mirrors)
}

// Fetcher downloads datasets. The zero value is ready to use.
type Fetcher struct {
	// Client makes the requests; nil means a client with dial, TLS and
	// response-header timeouts (but no overall one: the files are large).
	Client *http.Client
	// StallTimeout aborts a download that receives nothing for this long;
	// zero means one minute.
	StallTimeout time.Duration
	// Logf, if set, is told of each file checked, skipped or downloaded.
	Logf func(format string, args ...any)
}

var defaultClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
}}

func (f *Fetcher) logf(format string, args ...any) {
	if f.Logf != nil {
		f.Logf(format, args...)
	}
}

// Fetch downloads the files of dataset that dir/<dataset>/ lacks or holds
// damaged, creating the folder if needed. See the package documentation.
// A fetch that fails leaves no folder it created empty behind: run without
// a network, it creates nothing.
func (f *Fetcher) Fetch(ctx context.Context, dataset, dir string, mirrors []string) (err error) {
	ds, err := lookup(dataset)
	if err != nil {
		return err
	}
	if len(mirrors) == 0 {
		mirrors = ds.mirrors
	}
	dst := filepath.Join(dir, dataset)
	created := missingDirs(dst)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	defer func() {
		if err != nil {
			removeEmpty(created)
		}
	}()
	return f.fetchInto(ctx, dataset, ds, dst, mirrors)
}

// missingDirs returns the folders of path, deepest first, that do not
// exist yet: those MkdirAll(path) creates.
func missingDirs(path string) []string {
	var dirs []string
	for p := filepath.Clean(path); ; {
		if _, err := os.Lstat(p); err == nil {
			return dirs
		}
		dirs = append(dirs, p)
		parent := filepath.Dir(p)
		if parent == p {
			return dirs
		}
		p = parent
	}
}

// removeEmpty removes each of dirs, deepest first, while it is empty: a
// folder a failed fetch created is taken back, one holding files is kept.
func removeEmpty(dirs []string) {
	for _, d := range dirs {
		if os.Remove(d) != nil {
			return
		}
	}
}

// fetchInto downloads what dst lacks of ds.
func (f *Fetcher) fetchInto(ctx context.Context, name string, ds dataset, dst string, mirrors []string) error {
	if ds.archive != "" {
		return f.fetchArchive(ctx, name, ds, dst, mirrors)
	}
	for _, file := range ds.files {
		path := filepath.Join(dst, file.Name)
		if got, n, err := sumFile(path); err == nil && got == file.SHA256 {
			f.logf("fetch: %s: present, checksum valid", path)
			continue
		} else if err == nil {
			f.logf("fetch: %s: present but damaged (%d bytes, sha256 %s, want %s); downloading again", path, n, got, file.SHA256)
		}
		if err := f.fetchFile(ctx, file, path, mirrors); err != nil {
			if errors.Is(err, ErrOffline) {
				return fmt.Errorf("%w\nTo train without a network, copy the files of %s (%s) from a machine that has one, into a folder, and point --data_dir at that folder (or at its parent, holding %s/). They can be had from %s",
					err, name, fileNames(ds.files), name, strings.Join(ds.mirrors, " or "))
			}
			return err
		}
	}
	return nil
}

func fileNames(files []File) string {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// fetchFile tries each mirror in turn until one yields a valid copy.
func (f *Fetcher) fetchFile(ctx context.Context, file File, path string, mirrors []string) error {
	var errs []error
	offline := true
	for _, m := range mirrors {
		url := strings.TrimSuffix(m, "/") + "/" + file.Name
		if file.SHA256 == "" { // an archive
			f.logf("fetch: downloading %s from %s", file.Name, url)
		} else {
			f.logf("fetch: downloading %s (%d bytes) from %s", file.Name, file.Size, url)
		}
		err := f.download(ctx, file, path, url)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("fetch: %s: %w", path, context.Cause(ctx))
		}
		offline = offline && isDialError(err)
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if offline {
		return fmt.Errorf("%w for %s (offline?): %w", ErrOffline, file.Name, err)
	}
	return fmt.Errorf("fetch: %s: no mirror gave a valid copy: %w", path, err)
}

// isDialError tells whether err means the host could not be reached at all.
func isDialError(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}

// download fetches url into a temporary file beside path, checks its size
// and sum, and renames it to path. The temporary file never outlives it.
func (f *Fetcher) download(ctx context.Context, file File, path, url string) (err error) {
	stall := f.StallTimeout
	if stall <= 0 {
		stall = time.Minute
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(stall, func() {
		cancel(fmt.Errorf("%w: nothing received from %s for %v", ErrStalled, url, stall))
	})
	defer watchdog.Stop()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := f.Client
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return stalled(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+file.Name+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	limit := file.Size
	if file.SHA256 == "" { // an archive whose members are checked
		limit = maxArchive
	}
	body := &progressReader{r: io.LimitReader(resp.Body, limit+1), watchdog: watchdog, stall: stall}
	n, err := io.Copy(io.MultiWriter(tmp, h), body)
	if err != nil {
		return fmt.Errorf("GET %s: after %d bytes: %w", url, n, stalled(ctx, err))
	}
	if file.SHA256 == "" {
		if n > limit {
			return fmt.Errorf("GET %s: more than %d bytes, want an archive of the data set; download discarded", url, limit)
		}
	} else if got := hex.EncodeToString(h.Sum(nil)); n != file.Size || got != file.SHA256 {
		size := fmt.Sprintf("%d bytes", n)
		if n > file.Size {
			size = fmt.Sprintf("more than %d bytes", file.Size)
		}
		return fmt.Errorf("%w: %s from %s: want sha256 %s (%d bytes), got %s (%s); download discarded",
			ErrChecksum, file.Name, url, file.SHA256, file.Size, got, size)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	f.logf("fetch: %s: saved, checksum valid", path)
	return nil
}

// stalled replaces err by the watchdog's verdict when it fired.
func stalled(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrStalled) {
		return cause
	}
	return err
}

// progressReader pushes the stall watchdog back on every byte received.
type progressReader struct {
	r        io.Reader
	watchdog *time.Timer
	stall    time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.watchdog.Reset(p.stall)
	}
	return n, err
}

// sumFile returns the hex SHA-256 and size of the file at path.
func sumFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// fetchArchive fetches a dataset published as a zip archive: when a file
// of dst is missing or damaged, it downloads the archive beside them,
// extracts every file (each written to a temporary file, checked, then
// renamed into place) and removes the archive.
func (f *Fetcher) fetchArchive(ctx context.Context, name string, ds dataset, dst string, mirrors []string) error {
	var missing []File
	for _, file := range ds.files {
		path := filepath.Join(dst, file.Name)
		if got, _, err := sumFile(path); err == nil && got == file.SHA256 {
			f.logf("fetch: %s: present, checksum valid", path)
			continue
		}
		missing = append(missing, file)
	}
	if len(missing) == 0 {
		return nil
	}
	zipPath := filepath.Join(dst, ds.archive)
	if err := f.fetchFile(ctx, File{Name: ds.archive}, zipPath, mirrors); err != nil {
		if errors.Is(err, ErrOffline) {
			return fmt.Errorf("%w\nTo train without a network, download %s%s on a machine that has one, unzip it, and copy the files of its %s/ folder into %s (or point --data_dir at a folder holding %s/); then run this command again to check them",
				err, ds.mirrors[0], ds.archive, ds.dir, dst, name)
		}
		return err
	}
	defer os.Remove(zipPath)
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return fmt.Errorf("fetch: %s: not a zip archive: %w", zipPath, err)
	}
	defer zr.Close()
	entries := map[string]*zip.File{}
	for _, e := range zr.File {
		entries[e.Name] = e
	}
	for _, file := range missing {
		e, ok := entries[ds.dir+"/"+file.Name]
		if !ok {
			return fmt.Errorf("%w: %s holds no %s/%s", ErrChecksum, zipPath, ds.dir, file.Name)
		}
		if err := extract(e, file, filepath.Join(dst, file.Name)); err != nil {
			return err
		}
		f.logf("fetch: %s: extracted, checksum valid", filepath.Join(dst, file.Name))
	}
	return nil
}

// extract writes archive member e to path if its size and sum are file's.
func extract(e *zip.File, file File, path string) (err error) {
	r, err := e.Open()
	if err != nil {
		return fmt.Errorf("fetch: %s: %w", e.Name, err)
	}
	defer r.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+file.Name+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, file.Size+1))
	if err != nil {
		return fmt.Errorf("fetch: %s: %w", e.Name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != file.Size || got != file.SHA256 {
		return fmt.Errorf("%w: %s in the archive: want sha256 %s (%d bytes), got %s (%d bytes)", ErrChecksum, e.Name, file.SHA256, file.Size, got, n)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
