// ops_rnn.cpp - the fused recurrent cells (rnn.c): aten's _thnn_fused_lstm_cell and _thnn_fused_gru_cell
// with their backward.  aten's composite RNN code (RNN.cpp) sends PrivateUse1 tensors, as CUDA ones, to
// these ops for every LSTM/GRU step (nn.LSTM, nn.GRU, LSTMCell, GRUCell, packed or not, any depth or
// direction); the GEMMs and everything else of a step are ordinary native ops.  Sizes are checked as
// aten's CUDA kernels check them (RNN.cu, at::checkDim/checkSize... messages), then the C kernels get
// contiguous buffers.
#include "neuron.h"
#include "out.h"
#include "ops_util.h"

extern "C" {
#include "nk_rnn.h"
}

#include <ATen/TensorUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <tuple>

namespace neuron {

// The dtypes of aten's AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16, ...) with its message.
static void check_cell_dtype(const char *op, const at::Tensor &t)
{
	auto st = t.scalar_type();
	TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kBFloat16 || st == at::kHalf, "\"", op, "\" not implemented for '",
		    c10::toString(st), "'");
}

// aten's checkSizes of the CUDA cells (factor 4 for the LSTM, 3 for the GRU), and the checks its strided
// indexing does implicitly: one dtype, gates a whole number of hidden blocks, prev_hidden [B, H].
static void check_cell(const char *op, const at::Tensor &ig, const at::Tensor &hg, const at::Tensor &b1, const at::Tensor &b2,
		       int64_t factor, const at::Tensor &prev)
{
	at::CheckedFrom c = op;
	at::TensorArg a_ig{ig, "input_gates", 1}, a_hg{hg, "hidden_gates", 2}, a_b1{b1, "input_bias", 3}, a_b2{b2, "hidden_bias", 4};
	at::TensorArg a_p{prev, "prev_hidden", 5};
	at::checkDim(c, a_ig, 2);
	at::checkSameSize(c, a_ig, a_hg);
	int64_t gs = ig.size(1);
	if (b1.defined()) {
		at::checkDim(c, a_b1, 1);
		at::checkNumel(c, a_b1, gs);
		at::checkSameSize(c, a_b1, a_b2);
	}
	at::checkDim(c, a_p, 2);
	at::checkNumel(c, a_p, ig.size(0) * gs / factor);
	TORCH_CHECK(gs % factor == 0, op, ": input_gates has ", gs, " columns, not a multiple of ", factor, " gates");
	at::checkSize(c, a_p, {ig.size(0), gs / factor});
	at::checkAllSameType(c, {a_ig, a_hg, a_b1, a_b2, a_p});
	check_cell_dtype(op, ig);
}

static at::Tensor contig(const at::Tensor &t)
{
	return t.defined() ? t.contiguous() : t;
}

// Kernel work for launch_cost: bytes touched, times 4 for the transcendentals of every element.
static size_t cell_cost(const at::Tensor &t, int64_t elems)
{
	return (size_t)elems * t.element_size() * 4;
}

// ---- LSTM ------------------------------------------------------------------------------------------

static std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_fwd(const char *op, const at::Tensor &ig, const at::Tensor &hg,
								    const at::Tensor &cx, const at::Tensor &bi, const at::Tensor &bh)
{
	at::Tensor b1 = bi, b2 = bi.defined() ? bh : at::Tensor(); // aten: the biases count only with input_bias
	check_cell(op, ig, hg, b1, b2, 4, cx);
	DeviceScope g(ig.device().index());
	at::Tensor igc = ig.contiguous(), hgc = hg.contiguous(), cxc = cx.contiguous(), b1c = contig(b1), b2c = contig(b2);
	at::Tensor ws = at::empty_like(igc, at::MemoryFormat::Contiguous), hy = at::empty_like(cxc, at::MemoryFormat::Contiguous),
		   cy = at::empty_like(cxc, at::MemoryFormat::Contiguous);
	nk_lstm_cell_args_t a{};
	a.dtype = nk_dtype(ig.scalar_type(), op), a.B = cx.size(0), a.H = cx.size(1);
	a.ig = igc.const_data_ptr(), a.hg = hgc.const_data_ptr(), a.b_ih = cptr(b1c), a.b_hh = cptr(b2c), a.cx = cxc.const_data_ptr();
	a.hy = hy.data_ptr(), a.cy = cy.data_ptr(), a.ws = ws.data_ptr();
	if (cx.numel() > 0)
		launch_cost(queue_for(ig), nk_lstm_cell_run, a, "aten::_thnn_fused_lstm_cell", cell_cost(ig, 15 * cx.numel()));
	return {hy, cy, ws};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor &ig, const at::Tensor &hg, const at::Tensor &cx,
								const std::optional<at::Tensor> &bi, const std::optional<at::Tensor> &bh)
{
	NEURON_TRACK("aten::_thnn_fused_lstm_cell");
	return lstm_cell_fwd("_thnn_fused_lstm_cell", ig, hg, cx, opt(bi), opt(bh));
}

static std::tuple<at::Tensor &, at::Tensor &, at::Tensor &> lstm_cell_out(const at::Tensor &ig, const at::Tensor &hg, const at::Tensor &cx,
									  const std::optional<at::Tensor> &bi, const std::optional<at::Tensor> &bh,
									  at::Tensor &o0, at::Tensor &o1, at::Tensor &o2)
{
	NEURON_TRACK("aten::_thnn_fused_lstm_cell.out");
	auto r = lstm_cell_fwd("_thnn_fused_lstm_cell", ig, hg, cx, opt(bi), opt(bh));
	copy_out(o0, std::get<0>(r)), copy_out(o1, std::get<1>(r)), copy_out(o2, std::get<2>(r));
	return {o0, o1, o2};
}

// aten's checkLSTMBackwardSizes: the defined gradients, cx and cy [B, H], the workspace B*4H elements.
static void check_lstm_bwd(const char *op, const at::Tensor &dhy, const at::Tensor &dcy, const at::Tensor &cx, const at::Tensor &cy,
			   const at::Tensor &ws)
{
	at::CheckedFrom c = op;
	at::TensorArg a_dhy{dhy, "grad_hy", 1}, a_dcy{dcy, "grad_cy", 2}, a_cx{cx, "cx", 3}, a_cy{cy, "cy", 4}, a_ws{ws, "workspace", 5};
	const at::TensorArg &def = dhy.defined() ? a_dhy : a_dcy;
	at::checkDim(c, def, 2);
	auto sz = def->sizes();
	if (dhy.defined())
		at::checkSize(c, a_dhy, sz);
	if (dcy.defined())
		at::checkSize(c, a_dcy, sz);
	at::checkSize(c, a_cx, sz);
	at::checkSize(c, a_cy, sz);
	at::checkDim(c, a_ws, 2);
	at::checkSize(c, a_ws, {sz[0], sz[1] * 4});
	at::checkAllSameType(c, {a_dhy, a_dcy, a_cx, a_cy, a_ws});
	check_cell_dtype(op, ws);
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_bwd_impl(const std::optional<at::Tensor> &ghy, const std::optional<at::Tensor> &gcy,
									 const at::Tensor &cx, const at::Tensor &cy, const at::Tensor &ws, bool has_bias)
{
	NEURON_TRACK("aten::_thnn_fused_lstm_cell_backward_impl");
	const char *op = "_thnn_fused_lstm_cell_backward_impl";
	at::Tensor dhy = opt(ghy), dcy = opt(gcy);
	if (!dhy.defined() && !dcy.defined())
		return {};
	check_lstm_bwd(op, dhy, dcy, cx, cy, ws);
	DeviceScope g(ws.device().index());
	at::Tensor dhyc = contig(dhy), dcyc = contig(dcy), cxc = cx.contiguous(), cyc = cy.contiguous(), wsc = ws.contiguous();
	at::Tensor dgates = at::empty_like(wsc, at::MemoryFormat::Contiguous), dcx = at::empty_like(cxc, at::MemoryFormat::Contiguous);
	at::Tensor dbias = has_bias ? at::empty({ws.size(1)}, ws.options()) : at::Tensor();
	nk_lstm_cell_bwd_args_t a{};
	a.dtype = nk_dtype(ws.scalar_type(), op), a.B = cx.size(0), a.H = cx.size(1);
	a.dhy = cptr(dhyc), a.dcy = cptr(dcyc), a.cx = cxc.const_data_ptr(), a.cy = cyc.const_data_ptr(), a.ws = wsc.const_data_ptr();
	a.dgates = dgates.data_ptr(), a.dcx = dcx.data_ptr(), a.dbias = mptr(dbias);
	if (cx.numel() > 0)
		launch_cost(queue_for(ws), nk_lstm_cell_bwd_run, a, "aten::_thnn_fused_lstm_cell_backward_impl", cell_cost(ws, 16 * cx.numel()));
	else if (dbias.defined())
		dbias.zero_();
	return {dgates, dcx, dbias};
}

static std::tuple<at::Tensor &, at::Tensor &, at::Tensor &> lstm_cell_bwd_impl_out(const std::optional<at::Tensor> &ghy,
										   const std::optional<at::Tensor> &gcy, const at::Tensor &cx,
										   const at::Tensor &cy, const at::Tensor &ws, bool has_bias,
										   at::Tensor &o0, at::Tensor &o1, at::Tensor &o2)
{
	NEURON_TRACK("aten::_thnn_fused_lstm_cell_backward_impl.out");
	auto r = lstm_cell_bwd_impl(ghy, gcy, cx, cy, ws, has_bias);
	at::Tensor *outs[] = {&o0, &o1, &o2};
	const at::Tensor *res[] = {&std::get<0>(r), &std::get<1>(r), &std::get<2>(r)};
	for (int i = 0; i < 3; i++)
		if (res[i]->defined())
			copy_out(*outs[i], *res[i]);
	return {o0, o1, o2};
}

// ---- GRU -------------------------------------------------------------------------------------------

static std::tuple<at::Tensor, at::Tensor> gru_cell_fwd(const char *op, const at::Tensor &ig, const at::Tensor &hg, const at::Tensor &hx,
						       const at::Tensor &bi, const at::Tensor &bh)
{
	at::Tensor b1 = bi, b2 = bi.defined() ? bh : at::Tensor();
	check_cell(op, ig, hg, b1, b2, 3, hx);
	DeviceScope g(ig.device().index());
	at::Tensor igc = ig.contiguous(), hgc = hg.contiguous(), hxc = hx.contiguous(), b1c = contig(b1), b2c = contig(b2);
	at::Tensor ws = at::empty({hx.size(0), hx.size(1) * 5}, hx.options()), hy = at::empty_like(hxc, at::MemoryFormat::Contiguous);
	nk_gru_cell_args_t a{};
	a.dtype = nk_dtype(ig.scalar_type(), op), a.B = hx.size(0), a.H = hx.size(1);
	a.ig = igc.const_data_ptr(), a.hg = hgc.const_data_ptr(), a.b_ih = cptr(b1c), a.b_hh = cptr(b2c), a.hx = hxc.const_data_ptr();
	a.hy = hy.data_ptr(), a.ws = ws.data_ptr();
	if (hx.numel() > 0)
		launch_cost(queue_for(ig), nk_gru_cell_run, a, "aten::_thnn_fused_gru_cell", cell_cost(ig, 15 * hx.numel()));
	return {hy, ws};
}

static std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor &ig, const at::Tensor &hg, const at::Tensor &hx,
						   const std::optional<at::Tensor> &bi, const std::optional<at::Tensor> &bh)
{
	NEURON_TRACK("aten::_thnn_fused_gru_cell");
	return gru_cell_fwd("_thnn_fused_gru_cell", ig, hg, hx, opt(bi), opt(bh));
}

static std::tuple<at::Tensor &, at::Tensor &> gru_cell_out(const at::Tensor &ig, const at::Tensor &hg, const at::Tensor &hx,
							   const std::optional<at::Tensor> &bi, const std::optional<at::Tensor> &bh, at::Tensor &o0,
							   at::Tensor &o1)
{
	NEURON_TRACK("aten::_thnn_fused_gru_cell.out");
	auto r = gru_cell_fwd("_thnn_fused_gru_cell", ig, hg, hx, opt(bi), opt(bh));
	copy_out(o0, std::get<0>(r)), copy_out(o1, std::get<1>(r));
	return {o0, o1};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_bwd(const at::Tensor &dhy, const at::Tensor &ws, bool has_bias)
{
	NEURON_TRACK("aten::_thnn_fused_gru_cell_backward");
	const char *op = "_thnn_fused_gru_cell_backward";
	at::CheckedFrom c = op; // aten's checkGRUBackwardSizes
	at::TensorArg a_dhy{dhy, "grad_hy", 1}, a_ws{ws, "workspace", 2};
	at::checkDim(c, a_dhy, 2);
	at::checkSize(c, a_ws, {dhy.size(0), dhy.size(1) * 5});
	at::checkSameType(c, a_dhy, a_ws);
	check_cell_dtype(op, dhy);
	DeviceScope g(ws.device().index());
	int64_t B = dhy.size(0), H = dhy.size(1);
	at::Tensor dhyc = dhy.contiguous(), wsc = ws.contiguous();
	at::Tensor dig = at::empty({B, 3 * H}, ws.options()), dhg = at::empty({B, 3 * H}, ws.options());
	at::Tensor dhx = at::empty_like(dhyc, at::MemoryFormat::Contiguous), dbi, dbh;
	if (has_bias)
		dbi = at::empty({3 * H}, ws.options()), dbh = at::empty({3 * H}, ws.options());
	nk_gru_cell_bwd_args_t a{};
	a.dtype = nk_dtype(ws.scalar_type(), op), a.B = B, a.H = H;
	a.dhy = dhyc.const_data_ptr(), a.ws = wsc.const_data_ptr();
	a.dig = dig.data_ptr(), a.dhg = dhg.data_ptr(), a.dhx = dhx.data_ptr(), a.dbih = mptr(dbi), a.dbhh = mptr(dbh);
	if (dhy.numel() > 0)
		launch_cost(queue_for(ws), nk_gru_cell_bwd_run, a, "aten::_thnn_fused_gru_cell_backward", cell_cost(ws, 15 * dhy.numel()));
	else if (has_bias)
		dbi.zero_(), dbh.zero_();
	return {dig, dhg, dhx, dbi, dbh};
}

static std::tuple<at::Tensor &, at::Tensor &, at::Tensor &, at::Tensor &, at::Tensor &> gru_cell_bwd_out(const at::Tensor &dhy, const at::Tensor &ws,
												       bool has_bias, at::Tensor &o0, at::Tensor &o1,
												       at::Tensor &o2, at::Tensor &o3, at::Tensor &o4)
{
	NEURON_TRACK("aten::_thnn_fused_gru_cell_backward.out");
	auto r = gru_cell_bwd(dhy, ws, has_bias);
	copy_out(o0, std::get<0>(r)), copy_out(o1, std::get<1>(r)), copy_out(o2, std::get<2>(r));
	if (has_bias)
		copy_out(o3, std::get<3>(r)), copy_out(o4, std::get<4>(r));
	return {o0, o1, o2, o3, o4};
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "_thnn_fused_lstm_cell", lstm_cell);
	NEURON_IMPL(m, "_thnn_fused_lstm_cell.out", lstm_cell_out);
	NEURON_IMPL(m, "_thnn_fused_lstm_cell_backward_impl", lstm_cell_bwd_impl);
	NEURON_IMPL(m, "_thnn_fused_lstm_cell_backward_impl.out", lstm_cell_bwd_impl_out);
	NEURON_IMPL(m, "_thnn_fused_gru_cell", gru_cell);
	NEURON_IMPL(m, "_thnn_fused_gru_cell.out", gru_cell_out);
	NEURON_IMPL(m, "_thnn_fused_gru_cell_backward", gru_cell_bwd);
	NEURON_IMPL(m, "_thnn_fused_gru_cell_backward.out", gru_cell_bwd_out);
}
