// LR schedulers against PyTorch 1.13's own values: the kRef arrays below are
// get_last_lr() after construction and after each step(), three param groups
// (lrs 0.1, 0.05, 0.003), pasted from tests/optim/lr_scheduler_reference.py
// (run it with a Python that has torch 1.13 to regenerate them).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
namespace optim = halfgrad::optim;

namespace {

// StepLR
const std::vector<std::vector<double>> kRefStepLR = {
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.03, 0.015, 0.0009},
    {0.03, 0.015, 0.0009},
    {0.03, 0.015, 0.0009},
    {0.03, 0.015, 0.0009},
    {0.03, 0.015, 0.0009},
    {0.03, 0.015, 0.0009},
    {0.03, 0.015, 0.0009},
    {0.009, 0.0045, 0.00027},
    {0.009, 0.0045, 0.00027},
    {0.009, 0.0045, 0.00027},
    {0.009, 0.0045, 0.00027},
    {0.009, 0.0045, 0.00027},
    {0.009, 0.0045, 0.00027},
    {0.009, 0.0045, 0.00027},
    {0.0026999999999999997, 0.0013499999999999999, 8.1e-05},
    {0.0026999999999999997, 0.0013499999999999999, 8.1e-05},
    {0.0026999999999999997, 0.0013499999999999999, 8.1e-05},
    {0.0026999999999999997, 0.0013499999999999999, 8.1e-05},
    {0.0026999999999999997, 0.0013499999999999999, 8.1e-05},
    {0.0026999999999999997, 0.0013499999999999999, 8.1e-05},
    {0.0026999999999999997, 0.0013499999999999999, 8.1e-05},
    {0.0008099999999999998, 0.0004049999999999999, 2.43e-05},
    {0.0008099999999999998, 0.0004049999999999999, 2.43e-05},
    {0.0008099999999999998, 0.0004049999999999999, 2.43e-05},
};
// MultiStepLR
const std::vector<std::vector<double>> kRefMultiStepLR = {
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.025, 0.0125, 0.00075},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.00625, 0.003125, 0.0001875},
    {0.00625, 0.003125, 0.0001875},
    {0.00625, 0.003125, 0.0001875},
    {0.00625, 0.003125, 0.0001875},
    {0.00625, 0.003125, 0.0001875},
    {0.00625, 0.003125, 0.0001875},
};
// ExponentialLR
const std::vector<std::vector<double>> kRefExponentialLR = {
    {0.1, 0.05, 0.003},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.08100000000000002, 0.04050000000000001, 0.0024300000000000003},
    {0.07290000000000002, 0.03645000000000001, 0.002187},
    {0.06561000000000002, 0.03280500000000001, 0.0019683},
    {0.05904900000000002, 0.02952450000000001, 0.00177147},
    {0.05314410000000002, 0.02657205000000001, 0.0015943230000000001},
    {0.04782969000000002, 0.02391484500000001, 0.0014348907},
    {0.043046721000000024, 0.021523360500000012, 0.00129140163},
    {0.03874204890000002, 0.01937102445000001, 0.001162261467},
    {0.03486784401000002, 0.01743392200500001, 0.0010460353203000001},
    {0.03138105960900001, 0.015690529804500006, 0.0009414317882700001},
    {0.028242953648100012, 0.014121476824050006, 0.0008472886094430002},
    {0.025418658283290013, 0.012709329141645007, 0.0007625597484987002},
    {0.022876792454961013, 0.011438396227480507, 0.0006863037736488302},
    {0.020589113209464913, 0.010294556604732457, 0.0006176733962839472},
    {0.01853020188851842, 0.00926510094425921, 0.0005559060566555524},
    {0.01667718169966658, 0.00833859084983329, 0.0005003154509899972},
    {0.015009463529699923, 0.007504731764849962, 0.00045028390589099747},
    {0.013508517176729932, 0.006754258588364966, 0.0004052555153018977},
    {0.01215766545905694, 0.00607883272952847, 0.00036472996377170795},
    {0.010941898913151246, 0.005470949456575623, 0.00032825696739453717},
    {0.009847709021836121, 0.0049238545109180605, 0.00029543127065508344},
    {0.00886293811965251, 0.004431469059826255, 0.0002658881435895751},
    {0.007976644307687259, 0.0039883221538436296, 0.0002392993292306176},
    {0.007178979876918534, 0.003589489938459267, 0.00021536939630755584},
    {0.006461081889226681, 0.0032305409446133403, 0.00019383245667680025},
    {0.005814973700304013, 0.0029074868501520064, 0.00017444921100912022},
    {0.005233476330273611, 0.0026167381651368057, 0.0001570042899082082},
    {0.00471012869724625, 0.002355064348623125, 0.0001413038609173874},
    {0.004239115827521626, 0.002119557913760813, 0.00012717347482564865},
};
// CosineAnnealingLR
const std::vector<std::vector<double>> kRefCosineAnnealingLR = {
    {0.1, 0.05, 0.003},
    {0.09831332840130888, 0.04916518274408217, 0.0029659258262890683},
    {0.09336825748732973, 0.046717622392718754, 0.002866025403784439},
    {0.0855017856687341, 0.04282411613907041, 0.0027071067811865477},
    {0.07525000000000001, 0.03775, 0.0025000000000000005},
    {0.06331154273257479, 0.03184106660501176, 0.002258819045102521},
    {0.05050000000000001, 0.0255, 0.002},
    {0.037688457267425236, 0.019158933394988243, 0.0017411809548974794},
    {0.025750000000000016, 0.013250000000000005, 0.0015000000000000002},
    {0.015498214331265903, 0.008175883860929586, 0.0012928932188134526},
    {0.007631742512670285, 0.004282377607281252, 0.0011339745962155613},
    {0.0026866715986911243, 0.0018348172559178291, 0.0010340741737109318},
    {0.001, 0.001, 0.001},
    {0.0026866715986911187, 0.0018348172559178263, 0.0010340741737109318},
    {0.007631742512670279, 0.004282377607281248, 0.0011339745962155613},
    {0.015498214331265879, 0.008175883860929574, 0.0012928932188134524},
    {0.025749999999999978, 0.013249999999999984, 0.0015},
    {0.03768845726742523, 0.019158933394988236, 0.00174118095489748},
    {0.05049999999999999, 0.025499999999999984, 0.002000000000000001},
    {0.06331154273257475, 0.03184106660501173, 0.0022588190451025216},
    {0.07525, 0.03774999999999998, 0.0025000000000000014},
    {0.08550178566873409, 0.04282411613907039, 0.002707106781186549},
    {0.0933682574873297, 0.04671762239271872, 0.0028660254037844403},
    {0.09831332840130888, 0.04916518274408215, 0.0029659258262890705},
    {0.09999999999999999, 0.049999999999999975, 0.0030000000000000022},
    {0.09831332840130887, 0.049165182744082145, 0.0029659258262890705},
    {0.0933682574873297, 0.04671762239271872, 0.0028660254037844407},
    {0.08550178566873409, 0.04282411613907039, 0.0027071067811865494},
    {0.07525000000000001, 0.037749999999999985, 0.0025000000000000022},
    {0.06331154273257476, 0.031841066605011736, 0.002258819045102522},
    {0.050500000000000045, 0.02550000000000001, 0.0020000000000000018},
};
// LinearLR
const std::vector<std::vector<double>> kRefLinearLR = {
    {0.025, 0.0125, 0.00075},
    {0.033125, 0.0165625, 0.00099375},
    {0.04125, 0.020625, 0.0012375},
    {0.049375, 0.0246875, 0.0014812500000000001},
    {0.0575, 0.02875, 0.0017250000000000002},
    {0.065625, 0.0328125, 0.00196875},
    {0.07375000000000001, 0.036875000000000005, 0.0022125},
    {0.081875, 0.0409375, 0.00245625},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
    {0.09000000000000001, 0.045000000000000005, 0.0027},
};
// OneCycleLR
const std::vector<std::vector<double>> kRefOneCycleLR = {
    {0.0040000000000000036, 0.0020000000000000018, 0.00011999999999999988},
    {0.0076537824394582454, 0.0038268912197291227, 0.000229613473183747},
    {0.018058874503045733, 0.009029437251522866, 0.0005417662350913717},
    {0.03363119524647569, 0.016815597623237845, 0.0010089358573942705},
    {0.052000000000000005, 0.026000000000000002, 0.00156},
    {0.0703688047535243, 0.03518440237676215, 0.0021110641426057295},
    {0.08594112549695429, 0.042970562748477145, 0.0025782337649086283},
    {0.09634621756054176, 0.04817310878027088, 0.002890386526816253},
    {0.1, 0.05, 0.003},
    {0.09944154354509119, 0.049720771772545594, 0.0029832463063527354},
    {0.0977786491747459, 0.04888932458737295, 0.0029333594752423767},
    {0.09504846320134738, 0.04752423160067369, 0.002851453896040421},
    {0.09131197346804489, 0.04565598673402244, 0.0027393592040413466},
    {0.08665264698111695, 0.043326323490558476, 0.0025995794094335082},
    {0.0811745653949763, 0.04058728269748815, 0.0024352369618492894},
    {0.0750001, 0.03750005, 0.002250003},
    {0.06826717815011489, 0.034133589075057445, 0.002048015344503447},
    {0.06112620219362893, 0.030563101096814465, 0.0018337860658088677},
    {0.0537366897333025, 0.02686834486665125, 0.001612100691999075},
    {0.046263710266697504, 0.023131855133348752, 0.001387911308000925},
    {0.03887419780637107, 0.019437098903185537, 0.0011662259341911321},
    {0.03173322184988512, 0.01586661092494256, 0.0009519966554965536},
    {0.025000300000000013, 0.012500150000000007, 0.0007500090000000003},
    {0.0188258346050237, 0.00941291730251185, 0.0005647750381507109},
    {0.01334775301888306, 0.00667387650944153, 0.0004004325905664918},
    {0.008688426531955128, 0.004344213265977564, 0.0002606527959586539},
    {0.004951936798652629, 0.0024759683993263145, 0.00014855810395957884},
    {0.002221750825254118, 0.001110875412627059, 6.665252475762353e-05},
    {0.0005588564549088189, 0.00027942822745440944, 1.6765693647264565e-05},
    {4e-07, 2e-07, 1.2e-08},
    {0.0005588564549088189, 0.00027942822745440944, 1.6765693647264565e-05},
};
// group 1's momentum (SGD) or beta1 (Adam) after each step
const std::vector<double> kMomOneCycleLR = {0.9461939766255643,
                                            0.9353553390593273,
                                            0.9191341716182544,
                                            0.8999999999999999,
                                            0.8808658283817454,
                                            0.8646446609406726,
                                            0.8538060233744357,
                                            0.85,
                                            0.8505584586887436,
                                            0.8522213597106929,
                                            0.854951556604879,
                                            0.8586880612842003,
                                            0.8633474064085087,
                                            0.8688255099070633,
                                            0.875,
                                            0.8817329487816802,
                                            0.8888739533021842,
                                            0.8962634953206787,
                                            0.9037365046793212,
                                            0.9111260466978157,
                                            0.9182670512183198,
                                            0.9249999999999999,
                                            0.9311744900929366,
                                            0.9366525935914912,
                                            0.9413119387157997,
                                            0.945048443395121,
                                            0.947778640289307,
                                            0.9494415413112564,
                                            0.95,
                                            0.9494415413112564};
// OneCycleLRThreePhaseLinear
const std::vector<std::vector<double>> kRefOneCycleLRThreePhaseLinear = {
    {0.02, 0.02, 0.02},
    {0.054285714285714284, 0.054285714285714284, 0.054285714285714284},
    {0.08857142857142858, 0.08857142857142858, 0.08857142857142858},
    {0.12285714285714287, 0.12285714285714287, 0.12285714285714287},
    {0.15714285714285714, 0.15714285714285714, 0.15714285714285714},
    {0.19142857142857142, 0.19142857142857142, 0.19142857142857142},
    {0.1742857142857143, 0.1742857142857143, 0.1742857142857143},
    {0.14, 0.14, 0.14},
    {0.1057142857142857, 0.1057142857142857, 0.1057142857142857},
    {0.07142857142857142, 0.07142857142857142, 0.07142857142857142},
    {0.037142857142857144, 0.037142857142857144, 0.037142857142857144},
    {0.019266666666666668, 0.019266666666666668, 0.019266666666666668},
    {0.0178, 0.0178, 0.0178},
    {0.016333333333333335, 0.016333333333333335, 0.016333333333333335},
    {0.014866666666666667, 0.014866666666666667, 0.014866666666666667},
    {0.0134, 0.0134, 0.0134},
    {0.011933333333333334, 0.011933333333333334, 0.011933333333333334},
    {0.010466666666666668, 0.010466666666666668, 0.010466666666666668},
    {0.009, 0.009, 0.009},
    {0.007533333333333333, 0.007533333333333333, 0.007533333333333333},
    {0.006066666666666666, 0.006066666666666666, 0.006066666666666666},
    {0.004599999999999998, 0.004599999999999998, 0.004599999999999998},
    {0.0031333333333333317, 0.0031333333333333317, 0.0031333333333333317},
    {0.001666666666666667, 0.001666666666666667, 0.001666666666666667},
    {0.0001999999999999988, 0.0001999999999999988, 0.0001999999999999988},
};
// group 1's momentum (SGD) or beta1 (Adam) after each step
const std::vector<double> kMomOneCycleLRThreePhaseLinear = {0.9309523809523809,
                                                            0.9119047619047619,
                                                            0.8928571428571428,
                                                            0.8738095238095238,
                                                            0.8547619047619047,
                                                            0.8642857142857142,
                                                            0.8833333333333333,
                                                            0.9023809523809524,
                                                            0.9214285714285714,
                                                            0.9404761904761905,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95,
                                                            0.95};
// SequentialLR
const std::vector<std::vector<double>> kRefSequentialLR = {
    {0.010000000000000002, 0.005000000000000001, 0.00030000000000000003},
    {0.028000000000000004, 0.014000000000000002, 0.00084},
    {0.046000000000000006, 0.023000000000000003, 0.00138},
    {0.064, 0.032, 0.0019199999999999998},
    {0.082, 0.041, 0.00246},
    {0.1, 0.05, 0.003},
    {0.09755527298894293, 0.04877886008156409, 0.002929031948627973},
    {0.09046039886902862, 0.04523497400965494, 0.002723074641843674},
    {0.07940987335200904, 0.03971524204469721, 0.0024022886158240864},
    {0.06548539886902863, 0.03275997400965494, 0.001998074641843674},
    {0.050050000000000004, 0.02505, 0.0015500000000000002},
    {0.03461460113097138, 0.017340025990345065, 0.0011019253581563266},
    {0.020690126647990973, 0.010384757955302798, 0.0006977113841759142},
    {0.00963960113097138, 0.004865025990345065, 0.0003769253581563264},
    {0.002544727011057081, 0.0013211399184359196, 0.0001709680513720274},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.1, 0.05, 0.003},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.05, 0.025, 0.0015},
    {0.025, 0.0125, 0.00075},
    {0.025, 0.0125, 0.00075},
    {0.025, 0.0125, 0.00075},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.0125, 0.00625, 0.000375},
    {0.00625, 0.003125, 0.0001875},
    {0.00625, 0.003125, 0.0001875},
    {0.00625, 0.003125, 0.0001875},
    {0.003125, 0.0015625, 9.375e-05},
};

const std::vector<double> kLrs = {0.1, 0.05, 0.003};

hg::Tensor param() { return hg::zeros({1}).requires_grad_(); }

template <typename Opt>
std::unique_ptr<Opt> make_optimizer(typename Opt::Options o = {}) {
  o.lr = kLrs[0];
  auto opt = std::make_unique<Opt>(std::vector<hg::Tensor>{param()}, o);
  for (size_t g = 1; g < kLrs.size(); ++g) {
    o.lr = kLrs[g];
    opt->add_param_group({param()}, o);
  }
  return opt;
}

void check_row(const std::vector<double>& got, const std::vector<double>& want, size_t row) {
  INFO("row " << row);
  REQUIRE(got.size() == want.size());
  for (size_t g = 0; g < want.size(); ++g) {
    INFO("group " << g << ": got " << got[g] << ", PyTorch " << want[g]);
    CHECK(std::fabs(got[g] - want[g]) <= 1e-12 * std::fabs(want[g]));
  }
}

// Steps `sched` through `ref` (row 0: after construction), checking
// get_last_lr() and the optimizer's lrs.
void check_sequence(optim::Optimizer& opt, optim::LRScheduler& sched, const std::vector<std::vector<double>>& ref,
                    const std::vector<double>* momentum = nullptr,
                    const std::function<double()>& read_momentum = nullptr) {
  for (size_t row = 0; row < ref.size(); ++row) {
    if (row > 0) {
      opt.step();
      sched.step();
      if (momentum) {
        INFO("momentum after step " << row);
        CHECK(std::fabs(read_momentum() - (*momentum)[row - 1]) <= 1e-12 * (*momentum)[row - 1]);
      }
    }
    CHECK(sched.last_epoch() == static_cast<int64_t>(row));
    check_row(sched.get_last_lr(), ref[row], row);
    std::vector<double> lrs;
    for (size_t g = 0; g < opt.num_param_groups(); ++g) lrs.push_back(opt.lr(g));
    check_row(lrs, ref[row], row);
  }
}

// A scheduler restored half way (fresh optimizer and scheduler, state dict
// loaded, lrs restored as an optimizer state dict would) continues as the original.
template <typename Make>
void check_round_trip(Make make, const std::vector<std::vector<double>>& ref, size_t at) {
  auto opt = make_optimizer<optim::SGD>({.momentum = 0.9});
  auto sched = make(*opt);
  for (size_t i = 0; i < at; ++i) sched->step();
  const optim::LRSchedulerState state = sched->state_dict();
  CHECK(state.scalars.at("last_epoch") == static_cast<double>(at));

  auto opt2 = make_optimizer<optim::SGD>({.momentum = 0.9});
  auto sched2 = make(*opt2);
  sched2->load_state_dict(state);
  for (size_t g = 0; g < kLrs.size(); ++g) opt2->set_lr(g, sched2->get_last_lr()[g]);
  CHECK(sched2->last_epoch() == static_cast<int64_t>(at));
  check_row(sched2->get_last_lr(), ref[at], at);
  for (size_t row = at + 1; row < ref.size(); ++row) {
    sched2->step();
    check_row(sched2->get_last_lr(), ref[row], row);
  }
}

}  // namespace

TEST_CASE("LR schedulers match PyTorch 1.13", "[optim][lr_scheduler]") {
  auto opt = make_optimizer<optim::SGD>({.momentum = 0.9});
  SECTION("StepLR") {
    optim::StepLR scheduler(*opt, /*step_size=*/7, /*gamma=*/0.3);
    check_sequence(*opt, scheduler, kRefStepLR);
  }
  SECTION("MultiStepLR") {
    optim::MultiStepLR scheduler(*opt, {3, 10, 11, 25}, 0.5);
    check_sequence(*opt, scheduler, kRefMultiStepLR);
  }
  SECTION("ExponentialLR") {
    optim::ExponentialLR scheduler(*opt, 0.9);
    check_sequence(*opt, scheduler, kRefExponentialLR);
  }
  SECTION("CosineAnnealingLR") {
    optim::CosineAnnealingLR scheduler(*opt, /*T_max=*/12, /*eta_min=*/0.001);
    check_sequence(*opt, scheduler, kRefCosineAnnealingLR);
  }
  SECTION("LinearLR") {
    optim::LinearLR scheduler(*opt, 0.25, 0.9, 8);
    check_sequence(*opt, scheduler, kRefLinearLR);
  }
  SECTION("OneCycleLR cycles lr and SGD's momentum") {
    optim::OneCycleLR scheduler(*opt, {.max_lr = {0.1, 0.05, 0.003}, .total_steps = 30});
    check_sequence(*opt, scheduler, kRefOneCycleLR, &kMomOneCycleLR,
                   [&] { return opt->param_groups()[1].options.momentum; });
  }
  SECTION("SequentialLR: warm-up, cosine, step") {
    optim::LinearLR warm(*opt, 0.1, 1.0, 5);
    optim::CosineAnnealingLR cosine(*opt, 10, 0.0001);
    optim::StepLR step(*opt, 3, 0.5);
    optim::SequentialLR scheduler(*opt, {&warm, &cosine, &step}, {5, 15});
    check_sequence(*opt, scheduler, kRefSequentialLR);
  }
}

TEST_CASE("OneCycleLR: three phases, linear, epochs * steps_per_epoch, Adam's beta1", "[optim][lr_scheduler]") {
  auto opt = make_optimizer<optim::Adam>();
  optim::OneCycleLR scheduler(*opt, {.max_lr = {0.2},
                                     .epochs = 5,
                                     .steps_per_epoch = 5,
                                     .pct_start = 0.25,
                                     .anneal_strategy = optim::AnnealStrategy::Linear,
                                     .div_factor = 10.0,
                                     .final_div_factor = 100.0,
                                     .three_phase = true});
  CHECK(scheduler.total_steps() == 25);
  check_sequence(*opt, scheduler, kRefOneCycleLRThreePhaseLinear, &kMomOneCycleLRThreePhaseLinear,
                 [&] { return opt->param_groups()[1].options.betas[0]; });
}

TEST_CASE("LR scheduler state_dict round trip continues identically", "[optim][lr_scheduler]") {
  using P = std::unique_ptr<optim::LRScheduler>;
  SECTION("StepLR") {
    check_round_trip([](optim::Optimizer& o) { return P(new optim::StepLR(o, 7, 0.3)); }, kRefStepLR, 9);
  }
  SECTION("MultiStepLR") {
    check_round_trip(
        [](optim::Optimizer& o) {
          return P(new optim::MultiStepLR(o, {3, 10, 11, 25}, 0.5));
        },
        kRefMultiStepLR, 10);
  }
  SECTION("CosineAnnealingLR") {
    check_round_trip([](optim::Optimizer& o) { return P(new optim::CosineAnnealingLR(o, 12, 0.001)); },
                     kRefCosineAnnealingLR, 13);
  }
  SECTION("LinearLR") {
    check_round_trip([](optim::Optimizer& o) { return P(new optim::LinearLR(o, 0.25, 0.9, 8)); }, kRefLinearLR, 4);
  }
  SECTION("OneCycleLR") {
    check_round_trip(
        [](optim::Optimizer& o) {
          return P(new optim::OneCycleLR(o, {.max_lr = {0.1, 0.05, 0.003}, .total_steps = 30}));
        },
        kRefOneCycleLR, 11);
  }
  SECTION("SequentialLR, restored inside its second scheduler") {
    auto opt = make_optimizer<optim::SGD>({.momentum = 0.9});
    optim::LinearLR warm(*opt, 0.1, 1.0, 5);
    optim::CosineAnnealingLR cosine(*opt, 10, 0.0001);
    optim::StepLR step(*opt, 3, 0.5);
    optim::SequentialLR sched(*opt, {&warm, &cosine, &step}, {5, 15});
    for (int i = 0; i < 8; ++i) sched.step();
    const auto state = sched.state_dict();
    REQUIRE(state.schedulers.size() == 3);

    auto opt2 = make_optimizer<optim::SGD>({.momentum = 0.9});
    optim::LinearLR warm2(*opt2, 0.1, 1.0, 5);
    optim::CosineAnnealingLR cosine2(*opt2, 10, 0.0001);
    optim::StepLR step2(*opt2, 3, 0.5);
    optim::SequentialLR sched2(*opt2, {&warm2, &cosine2, &step2}, {5, 15});
    sched2.load_state_dict(state);
    for (size_t g = 0; g < kLrs.size(); ++g) opt2->set_lr(g, sched2.get_last_lr()[g]);
    for (size_t row = 9; row < kRefSequentialLR.size(); ++row) {
      sched2.step();
      check_row(sched2.get_last_lr(), kRefSequentialLR[row], row);
    }
  }
}

TEST_CASE("LR schedulers reject bad arguments", "[optim][lr_scheduler]") {
  auto sgd = [] { return make_optimizer<optim::SGD>({.momentum = 0.9}); };
  hgtest::expect_errors({
      {"StepLR step_size 0", [&] { optim::StepLR s(*sgd(), 0, 0.1); }, {"StepLR", "step_size", "got 0"}},
      {"StepLR gamma 0", [&] { optim::StepLR s(*sgd(), 3, 0.0); }, {"StepLR", "gamma", "> 0"}},
      {"ExponentialLR gamma < 0", [&] { optim::ExponentialLR s(*sgd(), -0.5); }, {"ExponentialLR", "gamma", "-0.5"}},
      {"MultiStepLR milestones not increasing",
       [&] {
         optim::MultiStepLR s(*sgd(), {3, 10, 10}, 0.1);
       },
       {"MultiStepLR", "strictly increasing", "10 after 10"}},
      {"MultiStepLR milestones decreasing",
       [&] {
         optim::MultiStepLR s(*sgd(), {5, 2}, 0.1);
       },
       {"MultiStepLR", "2 after 5"}},
      {"CosineAnnealingLR T_max 0", [&] { optim::CosineAnnealingLR s(*sgd(), 0); }, {"CosineAnnealingLR", "T_max"}},
      {"LinearLR start_factor 0", [&] { optim::LinearLR s(*sgd(), 0.0); }, {"LinearLR", "start_factor", "(0, 1]"}},
      {"LinearLR end_factor 2", [&] { optim::LinearLR s(*sgd(), 0.5, 2.0); }, {"LinearLR", "end_factor", "2"}},
      {"LinearLR total_iters 0", [&] { optim::LinearLR s(*sgd(), 0.5, 1.0, 0); }, {"LinearLR", "total_iters"}},
      {"OneCycleLR no total steps",
       [&] { optim::OneCycleLR s(*sgd(), {.max_lr = {0.1}}); },
       {"OneCycleLR", "total_steps", "steps_per_epoch"}},
      {"OneCycleLR pct_start 1.5",
       [&] { optim::OneCycleLR s(*sgd(), {.max_lr = {0.1}, .total_steps = 10, .pct_start = 1.5}); },
       {"OneCycleLR", "pct_start", "1.5"}},
      {"OneCycleLR max_lr per group",
       [&] {
         optim::OneCycleLR s(*sgd(), {.max_lr = {0.1, 0.2}, .total_steps = 10});
       },
       {"OneCycleLR", "max_lr", "got 2"}},
      {"OneCycleLR stepping past the end",
       [&] {
         auto o = sgd();
         optim::OneCycleLR s(*o, {.max_lr = {0.1}, .total_steps = 5});
         for (int i = 0; i < 6; ++i) s.step();
       },
       {"Tried to step 7 times. The specified number of total steps is 5"}},
      {"SequentialLR milestones count",
       [&] {
         auto o = sgd();
         optim::StepLR a(*o, 2), b(*o, 3);
         optim::SequentialLR s(*o, {&a, &b}, {});
       },
       {"SequentialLR", "2 schedulers and 0 milestones"}},
      {"SequentialLR other optimizer",
       [&] {
         auto o = sgd(), o2 = sgd();
         optim::StepLR a(*o, 2), b(*o2, 3);
         optim::SequentialLR s(*o, {&a, &b}, {4});
       },
       {"SequentialLR", "scheduler 1", "another optimizer"}},
      {"load_state_dict missing key",
       [&] {
         auto o = sgd();
         optim::StepLR s(*o, 2);
         s.load_state_dict({});
       },
       {"StepLR.load_state_dict", "last_epoch"}},
      {"load_state_dict from other hyperparameters",
       [&] {
         auto o = sgd();
         optim::StepLR a(*o, 2, 0.3), b(*o, 2, 0.5);
         b.load_state_dict(a.state_dict());
       },
       {"StepLR.load_state_dict", "gamma = 0.3", "has 0.5", "same arguments"}},
      {"load_state_dict from other milestones",
       [&] {
         auto o = sgd();
         optim::MultiStepLR a(*o, {2, 4}), b(*o, {2, 5});
         b.load_state_dict(a.state_dict());
       },
       {"MultiStepLR.load_state_dict", "milestones"}},
  });
}

TEST_CASE("OneCycleLR past its end leaves the scheduler as it was", "[optim][lr_scheduler]") {
  auto opt = make_optimizer<optim::SGD>({.momentum = 0.9});
  optim::OneCycleLR s(*opt, {.max_lr = {0.1}, .total_steps = 3});
  for (int i = 0; i < 3; ++i) s.step();  // last_epoch == total_steps is allowed, as in PyTorch
  const auto lr = s.get_last_lr();
  CHECK_THROWS_AS(s.step(), hg::Error);
  CHECK(s.last_epoch() == 3);
  CHECK(s.get_last_lr() == lr);
}

TEST_CASE("OneCycleLR's extra step may extrapolate to a negative lr: an Error, not a bad lr", "[optim][lr_scheduler]") {
  // PyTorch writes -0.0012666666666666694 here (last_epoch == total_steps, linear).
  auto opt = make_optimizer<optim::Adam>();
  optim::OneCycleLR s(*opt, {.max_lr = {0.2},
                             .epochs = 5,
                             .steps_per_epoch = 5,
                             .pct_start = 0.25,
                             .anneal_strategy = optim::AnnealStrategy::Linear,
                             .div_factor = 10.0,
                             .final_div_factor = 100.0,
                             .three_phase = true});
  for (int i = 0; i < 24; ++i) s.step();
  try {
    s.step();
    FAIL("no error");
  } catch (const hg::Error& e) {
    CHECK_THAT(e.what(),
               Catch::Matchers::Contains("OneCycleLR.step: epoch 25 gives group 0 the negative learning rate"));
  }
  CHECK(s.last_epoch() == 24);
  CHECK(opt->lr(0) == s.get_last_lr()[0]);
  CHECK(opt->param_groups()[1].options.betas[0] == kMomOneCycleLRThreePhaseLinear.back());  // untouched
}

TEST_CASE("LR scheduler load_state_dict refuses another kind's state and unknown keys", "[optim][lr_scheduler]") {
  hg::Tensor w = hg::zeros({2}).requires_grad_(true);
  hg::optim::SGD opt({w}, {.lr = 0.1});
  hg::optim::StepLR step(opt, 3, 0.5);
  hg::optim::MultiStepLR multi(opt, {2, 4}, 0.5);
  auto unknown = step.state_dict();
  unknown.scalars["bogus"] = 1;
  auto unknown_list = multi.state_dict();
  unknown_list.lists["bogus"] = {1.0};
  auto nested = step.state_dict();
  nested.schedulers.push_back(step.state_dict());
  hgtest::expect_errors({
      {"StepLR's state into a MultiStepLR", [&] { multi.load_state_dict(step.state_dict()); },
       {"MultiStepLR.load_state_dict", "unknown scalar \"step_size\""}},
      {"MultiStepLR's state into a StepLR", [&] { step.load_state_dict(multi.state_dict()); },
       {"StepLR.load_state_dict", "unknown list \"milestones\""}},
      {"an unknown scalar", [&] { step.load_state_dict(unknown); }, {"unknown scalar \"bogus\""}},
      {"an unknown list", [&] { multi.load_state_dict(unknown_list); }, {"unknown list \"bogus\""}},
      {"nested states", [&] { step.load_state_dict(nested); }, {"1 nested scheduler states"}},
  });
  step.load_state_dict(step.state_dict());  // its own still loads
}
