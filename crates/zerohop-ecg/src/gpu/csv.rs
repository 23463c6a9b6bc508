//! The CSV reader onto a CUDA device: the file's data rows go through pinned buffers into
//! device memory (`staging`), the device finds the lines and parses every plain decimal into
//! the float32 columns of a zerohop table in device memory (`csv_kernels.cu`), and the few lines
//! it cannot take (blank lines, exponents, clock times, empty fields, errors) are parsed on
//! the host by the CPU reader's own line parser and written into their rows. Results are
//! therefore bitwise the CPU reader's, and so are its errors (line, column and reason).
//!
//! Where the device's row order cannot be kept (a blank line inside the data shifts every row
//! after it), or more than one line in 32 needs the host (a clock-time column in every row),
//! the whole file is parsed by the CPU reader and the table copied over once; the report says
//! so.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys};
use zerohop::cuda::synchronize;
use zerohop::soa::{Schema, SoaTable, SOA_DEFAULT_ALIGNMENT};
use zerohop::{Buffer, DType, MemoryResource, Stream};

use super::module::PerDevice;
use super::{arg, device_resource, download, launch, upload};
use crate::csv::{is_blank, layout_prefix, parse_csv, plan, CsvHeader, CsvOptions, Fields};
use crate::error::{EcgError, Result};

const SOURCE: &str = include_str!("csv_kernels.cu");
/// Threads per block and bytes per block of the line kernels (as in csv_kernels.cu).
const THREADS: u32 = 256;
const TILE: usize = 256 * 64;

struct CsvKernels {
    count: usize,
    starts: usize,
    parse: usize,
    scatter: usize,
}

static LOADED: PerDevice<CsvKernels> = PerDevice::new();

/// Why a file goes to the CPU reader whole when the device leaves it too many lines.
const TOO_MANY_HOST_LINES: &str = "more than one line in 32 needs the host's parser (clock \
                                   times, exponents or quoted text in many rows)";

fn kernels(device: i32) -> Result<Arc<CsvKernels>> {
    LOADED.get(device, SOURCE, |function| {
        Ok(CsvKernels {
            count: function("count_newlines")?,
            starts: function("line_starts")?,
            parse: function("parse_lines")?,
            scatter: function("scatter_rows")?,
        })
    })
}

/// A table read onto the device, and how.
pub struct DeviceCsv {
    pub table: SoaTable,
    pub report: CsvReport,
}

#[derive(Clone, Debug, Default)]
pub struct CsvReport {
    /// Bytes of data rows moved to the device.
    pub bytes: usize,
    pub rows: usize,
    /// Lines the device left to the host's line parser.
    pub host_lines: usize,
    /// Why the whole file was parsed on the host and copied over (None: it was not).
    pub fallback: Option<String>,
    /// Wall seconds of each step, in order.
    pub timings: Vec<(&'static str, f64)>,
}

/// Reads a numeric CSV file (the options of [`crate::csv::read_csv`]) into a table of float32
/// columns in `device`'s memory (its current zerohop resource, plain device memory otherwise).
/// The table is ready when this returns; `stream` orders the work with the caller's.
pub fn read_csv_cuda(
    path: &Path,
    options: &CsvOptions,
    device: i32,
    stream: Stream,
) -> Result<DeviceCsv> {
    // Read, never mapped: a mapped file that someone truncates meanwhile is a SIGBUS, where a
    // read that ends early is an error naming the file. The bulk goes to the device through
    // `staging::upload_file`; the host reads only the layout lines, the last byte and the
    // lines the device leaves to it.
    let (file, len) = crate::file::open_regular(path, "CSV")?;
    let len = usize::try_from(len).map_err(|_| {
        crate::error::invalid(
            "CSV",
            format!("{}: larger than the address space", path.display()),
        )
    })?;
    let resource = device_resource(device)?;
    let mut reader = Reader {
        file: &file,
        len,
        layout: layout_prefix(path)?,
        path,
        options,
        device,
        stream,
        resource,
        report: CsvReport::default(),
        clock: Instant::now(),
    };
    let table = reader.read()?;
    let mut report = reader.report;
    report.rows = table.len();
    Ok(DeviceCsv { table, report })
}

struct Reader<'a> {
    file: &'a std::fs::File,
    /// The file's length when it was opened.
    len: usize,
    /// Its first lines, as many as the layout needs.
    layout: Vec<u8>,
    path: &'a Path,
    options: &'a CsvOptions,
    device: i32,
    stream: Stream,
    /// Where the table and the scratch buffers come from: the device's current resource.
    resource: Arc<dyn MemoryResource>,
    report: CsvReport,
    clock: Instant,
}

/// Lines the device parsed, with where they begin and end in the text.
struct HostLine {
    line: usize,
    begin: usize,
    end: usize,
}

impl Reader<'_> {
    fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.report
            .timings
            .push((name, (now - self.clock).as_secs_f64()));
        self.clock = now;
    }

    fn read(&mut self) -> Result<SoaTable> {
        let (header, selected) = plan(&self.layout, self.path, self.options)?;
        let fields = Fields::new(&header, &selected, self.path)?;
        let start = header.data_offset;
        let mut end = self.len;
        if end > start && self.bytes_at(end - 1, 1)? == b"\n" {
            end -= 1;
        }
        if end <= start {
            // No data rows, or one empty line: nothing for the device to parse.
            return self.fallback(None);
        }
        let (device, stream) = (self.device, self.stream);
        let len = end - start;
        self.report.bytes = len;
        let k = kernels(device)?;
        let tiles = len.div_ceil(TILE);
        let text = Buffer::allocate(self.resource.clone(), tiles * TILE, 256, stream)?;
        // The padding after the text reads as zero bytes (never a newline) to the kernels,
        // which run on `stream` after it.
        // SAFETY: the padding lies inside `text` (tiles * TILE bytes), on this device.
        unsafe {
            result::memset_d8_async(
                text.as_ptr().add(len) as sys::CUdeviceptr,
                0,
                tiles * TILE - len,
                stream.raw() as sys::CUstream,
            )
        }
        .map_err(|e| super::cuda_error("memset", e))?;
        // The reading threads copy on their own streams: whatever `stream` still does with
        // memory the pool just handed out must be over first.
        synchronize(device, stream)?;
        super::staging::upload_file(
            self.file,
            self.path,
            start as u64,
            len,
            device,
            text.as_ptr() as u64,
        )?;
        self.lap("read + copy to device");

        let (starts, lines) = self.line_starts(&k, &text, len, tiles)?;
        self.lap("find lines");

        let mut table = self.device_table(&fields.schema, lines)?;
        let columns = column_pointers(&table, device, stream)?;
        let Some(host_lines) = self.parse(&k, &text, &starts, lines, &header, &fields, &columns)?
        else {
            return self.fallback(Some(TOO_MANY_HOST_LINES));
        };
        self.lap("parse on device");
        self.report.host_lines = host_lines.len();
        if !host_lines.is_empty() {
            match self.host_parse(&k, &host_lines, lines, &header, &fields, &columns)? {
                Some(trailing_blanks) if trailing_blanks > 0 => {
                    table = self.shorter(&table, lines - trailing_blanks)?;
                }
                Some(_) => {}
                None => return self.fallback(Some("blank lines inside the data")),
            }
            self.lap("host lines");
        }
        synchronize(device, stream)?;
        Ok(table)
    }

    /// `count` bytes of the file from `offset`; a file that has shrunk meanwhile is an error
    /// naming it.
    fn bytes_at(&self, offset: usize, count: usize) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; count];
        std::os::unix::fs::FileExt::read_exact_at(self.file, &mut bytes, offset as u64).map_err(
            |source| EcgError::Io {
                path: self.path.to_owned(),
                source: std::io::Error::new(
                    source.kind(),
                    format!(
                        "the file changed while it was read: {count} bytes at {offset} of {}: \
                         {source}",
                        self.len
                    ),
                ),
            },
        )?;
        Ok(bytes)
    }

    /// The whole file through the CPU reader, copied to the device once.
    fn fallback(&mut self, why: Option<&str>) -> Result<SoaTable> {
        let data = crate::file::read_whole(self.path, "CSV")?;
        let table = parse_csv(&data, self.path, self.options)?;
        let on_device = table.copy_to(self.resource.clone(), self.stream)?;
        synchronize(self.device, self.stream)?;
        self.report.fallback = why.map(str::to_owned);
        self.lap("host parse + copy to device");
        Ok(on_device)
    }

    /// Where each line starts (`lines + 1` offsets, the last one past the end).
    fn line_starts(
        &self,
        k: &CsvKernels,
        text: &Buffer,
        len: usize,
        tiles: usize,
    ) -> Result<(Buffer, usize)> {
        let (device, stream) = (self.device, self.stream);
        let counts = Buffer::allocate(self.resource.clone(), tiles * 8, 256, stream)?;
        let (mut tp, mut cp) = (text.as_ptr() as u64, counts.as_ptr() as u64);
        // SAFETY: count_newlines(text: u8*, counts: u64*): `tiles` blocks read the padded
        // text and write one count each.
        unsafe {
            launch(
                k.count,
                tiles as u64,
                THREADS,
                0,
                stream,
                &mut [arg(&mut tp), arg(&mut cp)],
            )?
        };
        let counts: Vec<u64> = download(device, counts.as_ptr() as u64, tiles, stream)?;
        let mut offsets = Vec::with_capacity(tiles);
        let mut newlines = 0u64;
        for c in counts {
            offsets.push(newlines);
            newlines += c;
        }
        let lines = newlines as usize + 1;
        let offsets = upload(device, &offsets, DType::U64, stream)?;
        let starts = Buffer::allocate(self.resource.clone(), (lines + 1) * 8, 256, stream)?;
        let (mut ln, mut op, mut nl, mut sp) = (
            len as i64,
            offsets.data_ptr() as u64,
            lines as i64,
            starts.as_ptr() as u64,
        );
        // SAFETY: line_starts(text, len, offsets: u64* of tiles, lines, starts: u64* of
        // lines + 1): the newlines counted above are the ones it places.
        unsafe {
            launch(
                k.starts,
                tiles as u64,
                THREADS,
                0,
                stream,
                &mut [
                    arg(&mut tp),
                    arg(&mut ln),
                    arg(&mut op),
                    arg(&mut nl),
                    arg(&mut sp),
                ],
            )?
        };
        // `offsets` is read by the kernel: wait before it is freed.
        synchronize(device, stream)?;
        Ok((starts, lines))
    }

    /// Parses every line on the device into `columns`; returns the lines left to the host
    /// (sorted), or None when there are too many of them to be worth it.
    #[allow(clippy::too_many_arguments)]
    fn parse(
        &self,
        k: &CsvKernels,
        text: &Buffer,
        starts: &Buffer,
        lines: usize,
        header: &CsvHeader,
        fields: &Fields,
        columns: &zerohop::TensorView,
    ) -> Result<Option<Vec<HostLine>>> {
        let (device, stream) = (self.device, self.stream);
        let slots: Vec<i32> = fields
            .slots
            .iter()
            .map(|s| s.map_or(-1, |s| s as i32))
            .collect();
        let slots = upload(device, &slots, DType::I32, stream)?;
        // Up to one line in 32 is left to the host before the whole file is.
        let capacity = (lines / 32).max(1024);
        let host = Buffer::allocate(self.resource.clone(), capacity * 24, 256, stream)?;
        let count = upload(device, &[0u64], DType::U64, stream)?;
        let (mut tp, mut sp, mut nl, mut width, mut delim) = (
            text.as_ptr() as u64,
            starts.as_ptr() as u64,
            lines as i64,
            header.names.len() as i32,
            header.delimiter,
        );
        let (mut slp, mut colp, mut hp, mut cap, mut cnt) = (
            slots.data_ptr() as u64,
            columns.data_ptr() as u64,
            host.as_ptr() as u64,
            capacity as u64,
            count.data_ptr() as u64,
        );
        // SAFETY: parse_lines(text, starts: u64* of lines + 1, lines, width, delimiter: u8,
        // slots: i32* of width, columns: f32** (one per selected field, `lines` rows each),
        // host: u64* of 3 * capacity, capacity, host_count: u64*).
        unsafe {
            launch(
                k.parse,
                (lines as u64).div_ceil(THREADS as u64),
                THREADS,
                0,
                stream,
                &mut [
                    arg(&mut tp),
                    arg(&mut sp),
                    arg(&mut nl),
                    arg(&mut width),
                    arg(&mut delim),
                    arg(&mut slp),
                    arg(&mut colp),
                    arg(&mut hp),
                    arg(&mut cap),
                    arg(&mut cnt),
                ],
            )?
        };
        let total = download::<u64>(device, count.data_ptr() as u64, 1, stream)?[0] as usize;
        if total > capacity {
            return Ok(None);
        }
        let raw: Vec<u64> = download(device, host.as_ptr() as u64, total * 3, stream)?;
        let mut listed: Vec<HostLine> = raw
            .chunks_exact(3)
            .map(|t| HostLine {
                line: t[0] as usize,
                begin: t[1] as usize,
                end: t[2] as usize,
            })
            .collect();
        listed.sort_unstable_by_key(|l| l.line);
        Ok(Some(listed))
    }

    /// Parses the listed lines with the CPU reader's line parser (its first error is this
    /// read's error) and writes them into their rows. Returns how many blank lines end the
    /// data, or None when a blank line sits inside it (rows would shift).
    fn host_parse(
        &self,
        k: &CsvKernels,
        listed: &[HostLine],
        lines: usize,
        header: &CsvHeader,
        fields: &Fields,
        columns: &zerohop::TensorView,
    ) -> Result<Option<usize>> {
        let (device, stream) = (self.device, self.stream);
        let ncols = fields.schema.columns().len();
        let context = fields.context(self.path, header, self.options);
        let (mut rows, mut values, mut blanks) = (Vec::new(), Vec::new(), Vec::new());
        for host_line in listed {
            let bytes = self.bytes_at(
                header.data_offset + host_line.begin,
                host_line.end - host_line.begin,
            )?;
            let line = &bytes[..];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if is_blank(line) {
                blanks.push(host_line.line);
                continue;
            }
            let mut parsed = vec![0f32; ncols];
            let mut outputs: Vec<&mut [f32]> = parsed.chunks_mut(1).collect();
            let mut row = 0;
            context.parse_line(
                line,
                header.first_data_line + host_line.line,
                &mut row,
                &mut outputs,
            )?;
            rows.push(host_line.line as u64);
            values.extend_from_slice(&parsed);
        }
        // Blank lines are fine only as the data's last lines: then rows keep their lines.
        let tail = lines - blanks.len();
        if !blanks.iter().copied().eq(tail..lines) {
            return Ok(None);
        }
        if !rows.is_empty() {
            let count = rows.len();
            let rows = upload(device, &rows, DType::U64, stream)?;
            let values = upload(device, &values, DType::F32, stream)?;
            let (mut rp, mut vp, mut n, mut nc, mut cp) = (
                rows.data_ptr() as u64,
                values.data_ptr() as u64,
                count as i64,
                ncols as i32,
                columns.data_ptr() as u64,
            );
            // SAFETY: scatter_rows(rows: u64* of count, values: f32* of count * ncols, count,
            // ncols, columns: f32** of ncols); every row is below the table's `lines`.
            unsafe {
                launch(
                    k.scatter,
                    ((count * ncols) as u64).div_ceil(THREADS as u64),
                    THREADS,
                    0,
                    stream,
                    &mut [
                        arg(&mut rp),
                        arg(&mut vp),
                        arg(&mut n),
                        arg(&mut nc),
                        arg(&mut cp),
                    ],
                )?
            };
            // `rows` and `values` are read by the kernel: wait before they are freed.
            synchronize(device, stream)?;
        }
        Ok(Some(blanks.len()))
    }
}

/// The device addresses of the table's columns, in schema order, as a device array.
fn column_pointers(table: &SoaTable, device: i32, stream: Stream) -> Result<zerohop::TensorView> {
    let pointers = table
        .schema()
        .columns()
        .iter()
        .map(|c| Ok(table.column_view(&c.name)?.data_ptr() as u64))
        .collect::<Result<Vec<u64>>>()?;
    upload(device, &pointers, DType::U64, stream)
}

impl Reader<'_> {
    /// An uninitialised device table of `rows` rows of `schema`, ordered on the stream.
    fn device_table(&self, schema: &Schema, rows: usize) -> Result<SoaTable> {
        // SAFETY: the parse writes every row of every column (the device's lines, then the
        // host's), or the table is dropped unread on an error.
        Ok(unsafe {
            SoaTable::new_uninit_in(
                schema.clone(),
                rows,
                SOA_DEFAULT_ALIGNMENT,
                self.resource.clone(),
                self.stream,
            )
        }?)
    }

    /// The first `rows` rows of a device table of float32 columns, in a table of that length.
    fn shorter(&self, table: &SoaTable, rows: usize) -> Result<SoaTable> {
        let short = self.device_table(table.schema(), rows)?;
        for column in table.schema().columns() {
            let from = table.column_view(&column.name)?.data_ptr();
            let to = short.column_view(&column.name)?.data_ptr();
            // SAFETY: both columns hold at least `rows` float32 values in distinct buffers on
            // this device; the old table lives until the stream is synchronised below.
            unsafe { zerohop::cuda::copy_async(self.device, to, from, rows * 4, self.stream)? };
        }
        synchronize(self.device, self.stream)?;
        Ok(short)
    }
}
