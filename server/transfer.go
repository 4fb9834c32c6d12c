package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/inflight"
)

// The server runs outside every sandbox's cgroup: what it holds for a
// client, every client shares. So every body it receives and every
// download it sends is a transfer, counted per token and in total
// (Config.MaxTransfers and the rest), and the bytes of files never sit in
// its memory: an upload is received into a spool file and written into the
// sandbox from it, only once it is complete (an upload cut short or too
// large changes nothing); a download is copied from the sandbox into a
// spool file and sent from it, so a client that reads slowly holds neither
// the session's guard nor memory. Spool files are made in the server's own
// 0700 folder of workspaces and unlinked at once, so nothing is left
// behind even by a server that is killed.

// copyBuf is the buffer of each spool copy.
const copyBuf = 32 << 10

// newTransfers fills in cfg's transfer limits and returns their limiter.
func newTransfers(cfg *Config) (*inflight.Limiter, error) {
	if cfg.MaxTransfers == 0 {
		cfg.MaxTransfers = DefaultMaxTransfers
	}
	if cfg.MaxTransfersTotal == 0 {
		cfg.MaxTransfersTotal = max(DefaultMaxTransfersTotal, cfg.MaxTransfers)
	}
	if cfg.MaxTransferBytes == 0 {
		cfg.MaxTransferBytes = max(DefaultMaxTransferBytes, cfg.MaxUpload, cfg.MaxJSON)
	}
	if cfg.MaxTransferBytesTotal == 0 {
		cfg.MaxTransferBytesTotal = max(DefaultMaxTransferBytesTotal, cfg.MaxTransferBytes)
	}
	switch {
	case cfg.MaxTransfersTotal < cfg.MaxTransfers:
		return nil, fmt.Errorf("server: new: %d transfers in total is less than %d per token: give a total at least the per-token limit", cfg.MaxTransfersTotal, cfg.MaxTransfers)
	case cfg.MaxTransferBytes < max(cfg.MaxUpload, cfg.MaxJSON):
		return nil, fmt.Errorf("server: new: %d transfer bytes per token cannot hold one upload of %d bytes (or a JSON body of %d): give at least that", cfg.MaxTransferBytes, cfg.MaxUpload, cfg.MaxJSON)
	case cfg.MaxTransferBytesTotal < cfg.MaxTransferBytes:
		return nil, fmt.Errorf("server: new: %d transfer bytes in total is less than %d per token: give a total at least the per-token limit", cfg.MaxTransferBytesTotal, cfg.MaxTransferBytes)
	}
	return inflight.New(inflight.Limits{PerTenant: cfg.MaxTransfers, Total: cfg.MaxTransfersTotal,
		PerTenantBytes: cfg.MaxTransferBytes, TotalBytes: cfg.MaxTransferBytesTotal})
}

// busy turns a refusal of the transfer limiter into the public 429: the
// token's own limit (quota_exceeded) or the server's (server_busy).
func busy(err error) *api.Error {
	var f *inflight.Full
	if !errors.As(err, &f) {
		return nil
	}
	what := strconv.FormatInt(f.Limit, 10) + " transfers (request bodies and downloads)"
	if f.Bytes {
		what = strconv.FormatInt(f.Limit, 10) + " bytes of request bodies and downloads"
	}
	if f.Tenant {
		return errorf(http.StatusTooManyRequests, "quota_exceeded", "this token already has "+what+" in flight: wait for one to finish, then retry")
	}
	return errorf(http.StatusTooManyRequests, "server_busy", "the server already has "+what+" in flight for all its clients: retry in a moment")
}

// startTransfer admits a transfer of owner holding n bytes, or answers 429
// and returns nil.
func (s *Server) startTransfer(w http.ResponseWriter, owner int, n int64) *inflight.Ticket {
	t, err := s.transfers.Start(owner, n)
	if err != nil {
		writeError(w, busy(err))
		return nil
	}
	return t
}

// decodeJSON reads one JSON object of at most Config.MaxJSON bytes into v,
// refusing unknown fields and trailing data. The body is a transfer of
// owner's while it is read.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, owner int, v any) *api.Error {
	max := s.cfg.MaxJSON
	if r.ContentLength > max {
		return tooLarge(max)
	}
	reserve := max
	if r.ContentLength >= 0 {
		reserve = r.ContentLength
	}
	t, err := s.transfers.Start(owner, reserve)
	if err != nil {
		return busy(err)
	}
	defer t.Done()
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &mbe):
		return tooLarge(max)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "bad_json", "empty body: send a JSON object")
	case errors.As(err, &se):
		return errorf(http.StatusBadRequest, "bad_json", "malformed JSON at byte "+strconv.FormatInt(se.Offset, 10)+": "+se.Error())
	case errors.As(err, &te):
		return errorf(http.StatusBadRequest, "bad_json", "wrong JSON type for field "+strconv.Quote(te.Field)+": want "+te.Type.String())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "bad_json", "truncated JSON body: send a complete object")
	}
	// Unknown fields and the rest: encoding/json messages hold only input.
	return errorf(http.StatusBadRequest, "bad_json", "bad JSON request: "+err.Error())
}

func tooLarge(max int64) *api.Error {
	return errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body is larger than "+strconv.FormatInt(max, 10)+" bytes: send less")
}

// spool returns a new, empty, already unlinked file in the server's
// folder, for one transfer.
func (s *Server) spool() (*os.File, error) {
	f, err := os.CreateTemp(s.ws.dir, "spool-")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// errNoSpool is the public error when the server cannot spool a transfer;
// the reason is logged.
var errNoSpool = errorf(http.StatusInsufficientStorage, "no_space", "the server has no room to hold this transfer now: retry later, or send less")

// spoolWriter writes to a spool file, reserving each chunk with the
// transfer's ticket first when grow is set (the size was not known when
// the transfer started). Its errors are *api.Error.
type spoolWriter struct {
	s    *Server
	f    *os.File
	t    *inflight.Ticket
	grow bool
}

func (sw *spoolWriter) Write(p []byte) (int, error) {
	if sw.grow {
		if err := sw.t.Grow(int64(len(p))); err != nil {
			return 0, busy(err)
		}
	}
	n, err := sw.f.Write(p)
	if err != nil {
		sw.s.log.Error("spool a transfer", "dir", sw.s.ws.dir, "err", err)
		return n, errNoSpool
	}
	return n, nil
}

// receive reads an upload's body into a spool file, rewound, and returns
// it with its size. The caller closes it.
func (s *Server) receive(w http.ResponseWriter, r *http.Request, t *inflight.Ticket) (*os.File, int64, *api.Error) {
	f, err := s.spool()
	if err != nil {
		s.log.Error("spool an upload", "dir", s.ws.dir, "err", err)
		return nil, 0, errNoSpool
	}
	sw := &spoolWriter{s: s, f: f, t: t, grow: r.ContentLength < 0}
	n, err := io.CopyBuffer(sw, http.MaxBytesReader(w, r.Body, s.cfg.MaxUpload), make([]byte, copyBuf))
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
		if err != nil {
			s.log.Error("rewind a spooled upload", "err", err)
			err = errNoSpool
		}
	}
	var ae *api.Error
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return f, n, nil
	case errors.As(err, &ae):
	case errors.As(err, &mbe):
		ae = tooLarge(s.cfg.MaxUpload)
	default:
		ae = errorf(http.StatusBadRequest, "bad_body", "the upload body could not be read (it ended early or the connection broke): send it again")
	}
	f.Close()
	return nil, 0, ae
}
