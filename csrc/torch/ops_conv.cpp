// ops_conv.cpp - convolution on neuron: aten::convolution_overrideable and
// aten::convolution_backward_overrideable (at::_convolution routes conv1d/2d/3d, their transposes,
// padding='same', unbatched inputs ... here for PrivateUse1), and aten::im2col / col2im
// (nn.functional.unfold / fold), aten::unfold_backward.  Shapes are checked here; the kernels (nk_conv.h) get contiguous
// buffers, an explicit geometry and a workspace from the caching allocator.
#include "neuron.h"
#include "out.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>


namespace neuron {

static bool conv_dtype(at::ScalarType t)
{
	return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf || t == at::kLong;
}

// A parameter list of 1 or nsp values, expanded to nsp, each >= minv.
static std::vector<int64_t> expand_param(const char *op, const char *name, at::IntArrayRef v, int64_t nsp, int64_t minv,
					 const char *what)
{
	TORCH_CHECK(v.size() == 1 || (int64_t)v.size() == nsp, op, ": expected ", name, " to be a single integer value or a list of ",
		    nsp, " values to match the convolution dimensions, but got ", name, "=", v);
	std::vector<int64_t> r(nsp);
	for (int64_t i = 0; i < nsp; i++) {
		r[i] = v.size() == 1 ? v[0] : v[i];
		TORCH_CHECK(r[i] >= minv, op, ": ", what, " (got ", name, "=", v, ")");
	}
	return r;
}

struct ConvGeom {
	int64_t nsp, N, Cin, Cout, groups;
	bool transposed;
	std::vector<int64_t> in, out, k, stride, pad, dil, opad;
};

// Checks input/weight/parameters as at::_convolution does and derives the output size.
static ConvGeom conv_geom(const char *op, const at::Tensor &input, const at::Tensor &weight, at::IntArrayRef stride,
			  at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
			  int64_t groups)
{
	ConvGeom g;
	int64_t dim = input.dim();
	TORCH_CHECK(dim >= 3 && dim <= 5 && weight.dim() == dim, op, ": expected input and weight with the same number of dims, 3 to 5 ",
		    "(batch, channels, 1 to 3 spatial dims), but got input of size ", input.sizes(), " and weight of size ", weight.sizes());
	TORCH_CHECK(input.scalar_type() == weight.scalar_type(), op, ": Input type (", input.scalar_type(), ") and weight type (",
		    weight.scalar_type(), ") should be the same");
	TORCH_CHECK(conv_dtype(input.scalar_type()), op, ": dtype ", input.scalar_type(),
		    " is not supported on neuron (float32, float64, bfloat16, float16 and int64 are)");
	TORCH_CHECK(groups > 0, op, ": non-positive groups is not supported (got groups=", groups, ")");
	g.nsp = dim - 2, g.groups = groups, g.transposed = transposed;
	g.stride = expand_param(op, "stride", stride, g.nsp, 1, "non-positive stride is not supported");
	g.pad = expand_param(op, "padding", padding, g.nsp, 0, "negative padding is not supported");
	g.dil = expand_param(op, "dilation", dilation, g.nsp, 1, "dilation should be greater than zero");
	g.opad = transposed ? expand_param(op, "output_padding", output_padding, g.nsp, 0, "negative output padding is not supported")
			    : std::vector<int64_t>(g.nsp, 0);
	g.N = input.size(0), g.Cin = input.size(1);
	for (int64_t i = 0; i < g.nsp; i++) {
		g.in.push_back(input.size(2 + i));
		g.k.push_back(weight.size(2 + i));
		TORCH_CHECK(g.k[i] > 0, op, ": weight should have at least one element in each kernel dim, but got weight of size ", weight.sizes());
	}
	if (!transposed) {
		g.Cout = weight.size(0);
		TORCH_CHECK(g.Cout % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ", groups,
			    " at dimension 0, but got weight of size ", weight.sizes(), " instead");
		TORCH_CHECK(weight.size(1) * groups == g.Cin, "Given groups=", groups, ", weight of size ", weight.sizes(), ", expected input",
			    input.sizes(), " to have ", weight.size(1) * groups, " channels, but got ", g.Cin, " channels instead");
		for (int64_t i = 0; i < g.nsp; i++) {
			int64_t ext = g.dil[i] * (g.k[i] - 1) + 1, padded = g.in[i] + 2 * g.pad[i];
			TORCH_CHECK(padded >= ext, op, ": Calculated padded input size per channel: ", padded, " in dim ", i,
				    ". Kernel size (dilated): ", ext, ". Kernel size can't be greater than actual input size (input ",
				    input.sizes(), ", weight ", weight.sizes(), ")");
			g.out.push_back((padded - ext) / g.stride[i] + 1);
		}
	} else {
		TORCH_CHECK(weight.size(0) == g.Cin, "Given transposed=1, weight of size ", weight.sizes(), ", expected input", input.sizes(),
			    " to have ", weight.size(0), " channels, but got ", g.Cin, " channels instead");
		TORCH_CHECK(g.Cin % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ", groups,
			    " at dimension 0, but got weight of size ", weight.sizes(), " instead");
		g.Cout = weight.size(1) * groups;
		for (int64_t i = 0; i < g.nsp; i++) {
			TORCH_CHECK(g.opad[i] < g.stride[i] || g.opad[i] < g.dil[i], op,
				    ": output padding must be smaller than either stride or dilation, but got output_padding=", output_padding,
				    ", stride=", stride, ", dilation=", dilation);
			int64_t o = (g.in[i] - 1) * g.stride[i] - 2 * g.pad[i] + g.dil[i] * (g.k[i] - 1) + g.opad[i] + 1;
			TORCH_CHECK(o > 0 || g.in[i] == 0, op, ": Given input size per channel ", g.in[i], " in dim ", i,
				    ", calculated output size ", o, ": output size is too small (input ", input.sizes(), ", weight ",
				    weight.sizes(), ")");
			g.out.push_back(std::max<int64_t>(o, 0));
		}
	}
	return g;
}

// The kernel's geometry.  The transposed convolution is the adjoint of the convolution from its output
// (the kernel's x, Cout channels) to its input (the kernel's y, Cin channels).
static nk_conv_args_t conv_args(const ConvGeom &g, int mode, at::ScalarType t, const char *name)
{
	nk_conv_args_t a{};
	a.mode = mode, a.dtype = nk_dtype(t, name), a.nsp = (int)g.nsp;
	a.N = g.N, a.G = g.groups;
	a.C = g.transposed ? g.Cout : g.Cin;
	a.O = g.transposed ? g.Cin : g.Cout;
	for (int64_t i = 0; i < g.nsp; i++) {
		a.in[i] = g.transposed ? g.out[i] : g.in[i];
		a.out[i] = g.transposed ? g.in[i] : g.out[i];
		a.k[i] = g.k[i], a.stride[i] = g.stride[i], a.pad[i] = g.pad[i], a.dil[i] = g.dil[i];
	}
	return a;
}

// Launches nk_conv_run with a workspace from the caching allocator (freed after the launch: its reuse on
// this queue is ordered after the kernel).
static void run_conv(nk_conv_args_t &a, const at::Tensor &like, const char *name)
{
	size_t ws = nk_conv_workspace(&a);
	at::Tensor work = ws ? at::empty({(int64_t)ws}, like.options().dtype(at::kByte)) : at::Tensor();
	a.work = ws ? work.data_ptr() : nullptr;
	a.work_bytes = ws;
	launch(current_queue(like.device().index()), nk_conv_run, a, name);
}

static std::vector<int64_t> nc_shape(int64_t N, int64_t C, const std::vector<int64_t> &sp)
{
	std::vector<int64_t> s{N, C};
	s.insert(s.end(), sp.begin(), sp.end());
	return s;
}

static at::Tensor conv_fwd(const at::Tensor &input, const at::Tensor &weight, const std::optional<at::Tensor> &bias_opt, at::IntArrayRef stride,
			   at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups)
{
	NEURON_TRACK("aten::convolution_overrideable");
	const char *op = "convolution";
	at::Tensor bias = bias_opt.has_value() ? *bias_opt : at::Tensor();
	ConvGeom g = conv_geom(op, input, weight, stride, padding, dilation, transposed, output_padding, groups);
	if (bias.defined()) {
		TORCH_CHECK(bias.dim() == 1 && bias.size(0) == g.Cout, "Given weight of size ", weight.sizes(), ", expected bias to be 1-dimensional with ",
			    g.Cout, " elements, but got bias of size ", bias.sizes(), " instead");
		TORCH_CHECK(bias.scalar_type() == input.scalar_type(), op, ": Input type (", input.scalar_type(), ") and bias type (",
			    bias.scalar_type(), ") should be the same");
	}
	c10::DeviceGuard guard(input.device());
	at::Tensor x = input.contiguous(), w = weight.contiguous(), b = bias.defined() ? bias.contiguous() : at::Tensor();
	at::Tensor y = at::empty(nc_shape(g.N, g.Cout, g.out), input.options());
	if (y.numel()) {
		nk_conv_args_t a = conv_args(g, transposed ? NK_CONV_BWD_DATA : NK_CONV_FWD, input.scalar_type(), "aten::convolution_overrideable");
		a.w = w.const_data_ptr(), a.b = b.defined() ? b.const_data_ptr() : nullptr;
		if (!transposed)
			a.x = x.const_data_ptr(), a.y = y.data_ptr();
		else
			a.dy = x.const_data_ptr(), a.dx = y.data_ptr();
		run_conv(a, y, "aten::convolution_overrideable");
	}
	// keep a channels_last input's layout, as the CPU convolution does
	auto fmt = input.suggest_memory_format();
	if (fmt != at::MemoryFormat::Contiguous)
		y = y.contiguous(fmt);
	return y;
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_bwd(const at::Tensor &grad_output, const at::Tensor &input, const at::Tensor &weight,
							       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
							       at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> mask)
{
	NEURON_TRACK("aten::convolution_backward_overrideable");
	const char *op = "convolution_backward";
	const char *name = "aten::convolution_backward_overrideable";
	ConvGeom g = conv_geom(op, input, weight, stride, padding, dilation, transposed, output_padding, groups);
	auto want = nc_shape(g.N, g.Cout, g.out);
	TORCH_CHECK(grad_output.sizes().equals(want), op, ": expected grad_output of size ", at::IntArrayRef(want), ", but got ",
		    grad_output.sizes(), " (input ", input.sizes(), ", weight ", weight.sizes(), ")");
	TORCH_CHECK(grad_output.scalar_type() == input.scalar_type(), op, ": grad_output type (", grad_output.scalar_type(),
		    ") and input type (", input.scalar_type(), ") should be the same");
	c10::DeviceGuard guard(input.device());
	at::Tensor go = grad_output.contiguous(), x = input.contiguous(), w = weight.contiguous();
	at::Tensor dx, dw, db;
	at::ScalarType t = input.scalar_type();
	if (mask[0]) {
		dx = at::empty(input.sizes(), input.options());
		if (dx.numel()) {
			nk_conv_args_t a = conv_args(g, transposed ? NK_CONV_FWD : NK_CONV_BWD_DATA, t, name);
			a.w = w.const_data_ptr();
			if (!transposed)
				a.dy = go.const_data_ptr(), a.dx = dx.data_ptr();
			else
				a.x = go.const_data_ptr(), a.y = dx.data_ptr();
			run_conv(a, dx, name);
		}
	}
	if (mask[1]) {
		dw = at::empty(weight.sizes(), weight.options());
		if (dw.numel()) {
			nk_conv_args_t a = conv_args(g, NK_CONV_BWD_WEIGHT, t, name);
			a.x = transposed ? go.const_data_ptr() : x.const_data_ptr();
			a.dy = transposed ? x.const_data_ptr() : go.const_data_ptr();
			a.dw = dw.data_ptr();
			run_conv(a, dw, name);
		}
	}
	if (mask[2]) {
		db = at::empty({g.Cout}, grad_output.options());
		if (db.numel()) {
			nk_conv_args_t a{};
			a.mode = NK_CONV_BWD_BIAS, a.dtype = nk_dtype(t, name), a.nsp = (int)g.nsp;
			a.N = g.N, a.C = a.O = g.Cout, a.G = 1;
			for (int64_t i = 0; i < g.nsp; i++)
				a.in[i] = a.out[i] = g.out[i], a.k[i] = a.stride[i] = a.dil[i] = 1;
			a.dy = go.const_data_ptr(), a.db = db.data_ptr();
			run_conv(a, db, name);
		}
	}
	return {dx, dw, db};
}

// ---- im2col / col2im (2 spatial dims, as ATen's) ---------------------------------------------------
struct Im2colGeom {
	int64_t k[2], d[2], p[2], s[2];
};

static Im2colGeom im2col_params(const char *op, at::IntArrayRef kernel_size, at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride)
{
	TORCH_CHECK(kernel_size.size() == 2, "It is expected kernel_size equals to 2, but got size ", kernel_size.size());
	TORCH_CHECK(dilation.size() == 2, "It is expected dilation equals to 2, but got size ", dilation.size());
	TORCH_CHECK(padding.size() == 2, "It is expected padding equals to 2, but got size ", padding.size());
	TORCH_CHECK(stride.size() == 2, "It is expected stride equals to 2, but got size ", stride.size());
	Im2colGeom g;
	for (int i = 0; i < 2; i++) {
		g.k[i] = kernel_size[i], g.d[i] = dilation[i], g.p[i] = padding[i], g.s[i] = stride[i];
		TORCH_CHECK(g.k[i] > 0, op, ": kernel size should be greater than zero, but got kernel_size=", kernel_size);
		TORCH_CHECK(g.d[i] > 0, op, ": dilation should be greater than zero, but got dilation=", dilation);
		TORCH_CHECK(g.p[i] >= 0, op, ": padding should be non-negative, but got padding=", padding);
		TORCH_CHECK(g.s[i] > 0, op, ": stride should be greater than zero, but got stride=", stride);
	}
	return g;
}

// Blocks per dim for an image of size (h, w); raises unless both are at least one.
static std::array<int64_t, 2> im2col_blocks(const char *op, const Im2colGeom &g, int64_t h, int64_t w, at::IntArrayRef kernel_size,
					     at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride)
{
	std::array<int64_t, 2> sz{h, w}, r{};
	for (int i = 0; i < 2; i++)
		r[i] = (sz[i] + 2 * g.p[i] - (g.d[i] * (g.k[i] - 1) + 1)) / g.s[i] + 1;
	bool ok = h + 2 * g.p[0] >= g.d[0] * (g.k[0] - 1) + 1 && w + 2 * g.p[1] >= g.d[1] * (g.k[1] - 1) + 1 && r[0] >= 1 && r[1] >= 1;
	TORCH_CHECK(ok, op, ": Given input with spatial size (", h, ", ", w, "), kernel_size=", kernel_size, ", dilation=", dilation,
		    ", padding=", padding, ", stride=", stride, ", calculated shape of the array of sliding blocks as (", r[0], ", ", r[1],
		    "), but its components must be at least one.");
	return r;
}

static nk_im2col_args_t im2col_args(const Im2colGeom &g, at::ScalarType t, int64_t N, int64_t C, int64_t h, int64_t w,
				    const std::array<int64_t, 2> &blocks, bool col2im, const char *name)
{
	nk_im2col_args_t a{};
	a.dtype = nk_dtype(t, name), a.nsp = 2, a.col2im = col2im, a.N = N, a.C = C;
	a.in[0] = h, a.in[1] = w, a.out[0] = blocks[0], a.out[1] = blocks[1];
	for (int i = 0; i < 2; i++)
		a.k[i] = g.k[i], a.stride[i] = g.s[i], a.pad[i] = g.p[i], a.dil[i] = g.d[i];
	return a;
}

static at::Tensor im2col(const at::Tensor &self, at::IntArrayRef kernel_size, at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride)
{
	NEURON_TRACK("aten::im2col");
	const char *op = "im2col";
	Im2colGeom g = im2col_params(op, kernel_size, dilation, padding, stride);
	bool batched = self.dim() == 4;
	TORCH_CHECK((self.dim() == 3 && self.size(0) != 0 && self.size(1) != 0 && self.size(2) != 0) ||
			    (batched && self.size(1) != 0 && self.size(2) != 0 && self.size(3) != 0),
		    "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
		    self.sizes());
	TORCH_CHECK(!self.is_complex(), op, ": complex dtypes are not supported on neuron (got ", self.scalar_type(), ")");
	c10::DeviceGuard guard(self.device());
	at::Tensor x = batched ? self.contiguous() : self.contiguous().unsqueeze(0);
	int64_t N = x.size(0), C = x.size(1), h = x.size(2), w = x.size(3);
	auto blocks = im2col_blocks(op, g, h, w, kernel_size, dilation, padding, stride);
	at::Tensor out = at::empty({N, C * g.k[0] * g.k[1], blocks[0] * blocks[1]}, self.options());
	if (out.numel()) {
		nk_im2col_args_t a = im2col_args(g, self.scalar_type(), N, C, h, w, blocks, false, "aten::im2col");
		a.src = x.const_data_ptr(), a.dst = out.data_ptr();
		launch(current_queue(self.device().index()), nk_im2col_run, a, "aten::im2col");
	}
	return batched ? out : out.squeeze(0);
}

static at::Tensor col2im(const at::Tensor &self, at::IntArrayRef output_size, at::IntArrayRef kernel_size, at::IntArrayRef dilation,
			 at::IntArrayRef padding, at::IntArrayRef stride)
{
	NEURON_TRACK("aten::col2im");
	const char *op = "col2im";
	TORCH_CHECK(output_size.size() == 2, "It is expected output_size equals to 2, but got size ", output_size.size());
	Im2colGeom g = im2col_params(op, kernel_size, dilation, padding, stride);
	bool batched = self.dim() == 3;
	TORCH_CHECK((self.dim() == 2 && self.size(0) != 0 && self.size(1) != 0) || (batched && self.size(1) != 0 && self.size(2) != 0),
		    "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for input, but got: ",
		    self.sizes());
	TORCH_CHECK(self.is_floating_point() || at::isIntegralType(self.scalar_type(), false), op, ": dtype ", self.scalar_type(),
		    " is not supported on neuron");
	int64_t kk = g.k[0] * g.k[1];
	int64_t rows = self.size(batched ? 1 : 0), L = self.size(batched ? 2 : 1);
	TORCH_CHECK(rows % kk == 0, "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got input.size(1)=",
		    rows, " and kernel_size=", kernel_size);
	auto blocks = im2col_blocks(op, g, output_size[0], output_size[1], kernel_size, dilation, padding, stride);
	TORCH_CHECK(L == blocks[0] * blocks[1], "Given output_size=", output_size, ", kernel_size=", kernel_size, ", dilation=", dilation,
		    ", padding=", padding, ", stride=", stride, ", expected size of input's dimension 2 to match the calculated number of ",
		    "sliding blocks ", blocks[0], " * ", blocks[1], " = ", blocks[0] * blocks[1], ", but got input.size(2)=", L, ".");
	c10::DeviceGuard guard(self.device());
	at::Tensor col = batched ? self.contiguous() : self.contiguous().unsqueeze(0);
	int64_t N = col.size(0), C = rows / kk;
	at::Tensor out = at::empty({N, C, output_size[0], output_size[1]}, self.options());
	if (out.numel()) {
		nk_im2col_args_t a = im2col_args(g, self.scalar_type(), N, C, output_size[0], output_size[1], blocks, true, "aten::col2im");
		a.src = col.const_data_ptr(), a.dst = out.data_ptr();
		launch(current_queue(self.device().index()), nk_im2col_run, a, "aten::col2im");
	}
	return batched ? out : out.squeeze(0);
}

// unfold_backward: grad of x.unfold(dim, size, step), a 1-d col2im.  grad_in [.., nwin (at dim), .., size]
// is moved to columns [P*Q, size, nwin] (P, Q: the dims before and after dim); col2im sums the windows
// into [P*Q, L], moved back to input_sizes.
static at::Tensor unfold_backward(const at::Tensor &grad_in, at::IntArrayRef input_sizes, int64_t dim, int64_t size, int64_t step)
{
	NEURON_TRACK("aten::unfold_backward");
	int64_t nd = (int64_t)input_sizes.size();
	int64_t d = nd ? c10::maybe_wrap_dim(dim, nd) : 0;
	TORCH_CHECK(size >= 0 && step > 0, "unfold_backward: size must be non-negative and step positive, got size=", size, ", step=", step);
	TORCH_CHECK(!grad_in.is_complex(), "unfold_backward: complex dtypes are not supported on neuron (got ", grad_in.scalar_type(), ")");
	TORCH_CHECK(grad_in.dim() == nd + 1 && grad_in.size(-1) == size, "unfold_backward: grad_in of size ",
		    grad_in.sizes(), " does not match input_sizes=", input_sizes, ", dim=", dim, ", size=", size);
	int64_t P = 1, Q = 1, L = nd ? input_sizes[d] : 1, nwin = nd ? grad_in.size(d) : 1;
	for (int64_t i = 0; i < d; i++)
		P *= input_sizes[i];
	for (int64_t i = d + 1; i < nd; i++)
		Q *= input_sizes[i];
	TORCH_CHECK(size <= L && nwin == (L - size) / step + 1, "unfold_backward: grad_in of size ", grad_in.sizes(),
		    " does not match input_sizes=", input_sizes, ", dim=", dim, ", size=", size, ", step=", step);
	c10::DeviceGuard guard(grad_in.device());
	at::Tensor out = at::empty({P, Q, L}, grad_in.options());
	if (out.numel()) {
		at::Tensor col = grad_in.reshape({P, nwin, Q, size}).permute({0, 2, 3, 1}).contiguous();
		nk_im2col_args_t a{};
		a.dtype = nk_dtype(grad_in.scalar_type(), "aten::unfold_backward"), a.nsp = 1, a.col2im = true;
		a.N = P * Q, a.C = 1, a.in[0] = L, a.out[0] = nwin, a.k[0] = size, a.stride[0] = step, a.pad[0] = 0, a.dil[0] = 1;
		a.src = col.const_data_ptr(), a.dst = out.data_ptr();
		if (size == 0)
			out.zero_();
		else
			launch(current_queue(grad_in.device().index()), nk_im2col_run, a, "aten::unfold_backward");
	}
	return out.permute({0, 2, 1}).contiguous().view(input_sizes);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "convolution_overrideable", conv_fwd);
	NEURON_IMPL(m, "convolution_backward_overrideable", conv_bwd);
	NEURON_IMPL(m, "im2col", im2col);
	NEURON_IMPL(m, "col2im", col2im);
	NEURON_IMPL(m, "unfold_backward", unfold_backward);
}

} // namespace neuron
